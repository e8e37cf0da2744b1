//! Random packet loss: independent (Bernoulli) or bursty (Gilbert-Elliott two-state Markov chain), optionally
//! changing at given times.

use std::time::Duration;

use crate::rng::SimRng;

/// Parameters of a two-state Gilbert-Elliott channel, advanced once per packet.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GilbertElliott {
    /// Probability of moving from the good to the bad state.
    pub good_to_bad: f64,
    /// Probability of moving from the bad to the good state.
    pub bad_to_good: f64,
    /// Loss probability while in the good state.
    pub loss_in_good: f64,
    /// Loss probability while in the bad state.
    pub loss_in_bad: f64,
}

impl GilbertElliott {
    /// Long-run loss rate: the stationary probability of each state times its loss probability.
    pub fn mean_loss(&self) -> f64 {
        let transitions = self.good_to_bad + self.bad_to_good;
        if transitions == 0.0 {
            return self.loss_in_good;
        }
        (self.bad_to_good * self.loss_in_good + self.good_to_bad * self.loss_in_bad) / transitions
    }
}

/// Which random loss a link applies.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LossModel {
    None,
    Bernoulli(f64),
    GilbertElliott(GilbertElliott),
}

/// From `from` on, the link loses packets independently with `probability`, whatever model it had before (Tng's
/// lossy WAN raises its loss rate every 10 s).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LossStep {
    pub from: Duration,
    pub probability: f64,
}

/// A loss model with its state (the Gilbert-Elliott chain's current state) and the steps still to come.
#[derive(Clone, Debug)]
pub struct LossProcess {
    model: LossModel,
    in_bad_state: bool,
    /// In time order; those before `next_step` have taken effect.
    steps: Vec<LossStep>,
    next_step: usize,
}

impl LossProcess {
    /// `model` until the first of `steps` (sorted by time), each step's probability after it.
    pub fn new(model: LossModel, steps: Vec<LossStep>) -> Self {
        LossProcess { model, in_bad_state: false, steps, next_step: 0 }
    }

    /// Decides the fate of a packet at `now` (not earlier than the last one's): true = lost.
    pub fn next_is_lost(&mut self, now: Duration, rng: &mut SimRng) -> bool {
        while let Some(step) = self.steps.get(self.next_step).filter(|step| step.from <= now) {
            self.model = LossModel::Bernoulli(step.probability);
            self.next_step += 1;
        }
        match self.model {
            LossModel::None => false,
            LossModel::Bernoulli(probability) => rng.bernoulli(probability),
            LossModel::GilbertElliott(chain) => {
                let lost = rng.bernoulli(if self.in_bad_state { chain.loss_in_bad } else { chain.loss_in_good });
                let switch = if self.in_bad_state { chain.bad_to_good } else { chain.good_to_bad };
                if rng.bernoulli(switch) {
                    self.in_bad_state = !self.in_bad_state;
                }
                lost
            }
        }
    }
}
