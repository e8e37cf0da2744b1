//! Random packet loss: independent (Bernoulli) or bursty (Gilbert-Elliott two-state Markov chain).

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

/// A loss model with its state (the Gilbert-Elliott chain's current state).
#[derive(Clone, Debug)]
pub struct LossProcess {
    model: LossModel,
    in_bad_state: bool,
}

impl LossProcess {
    pub fn new(model: LossModel) -> Self {
        LossProcess { model, in_bad_state: false }
    }

    /// Decides the fate of the next packet: true = lost.
    pub fn next_is_lost(&mut self, rng: &mut SimRng) -> bool {
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
