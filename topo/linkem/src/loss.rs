//! Random loss: Bernoulli, or Gilbert-Elliott for bursts.

use rand_core::RngCore;

use crate::random::bernoulli;
use crate::spec::{GilbertElliott, LossSpec};

/// A loss model with its state (the Gilbert-Elliott chain remembers whether it is in the bad state).
#[derive(Debug, Clone)]
pub struct LossModel {
    spec: LossSpec,
    in_bad_state: bool,
}

impl LossModel {
    /// Gilbert-Elliott chains start in the good state.
    pub fn new(spec: LossSpec) -> LossModel {
        LossModel { spec, in_bad_state: false }
    }

    pub fn spec(&self) -> &LossSpec {
        &self.spec
    }

    /// Decides the fate of one packet: true means drop it.
    pub fn drops_next(&mut self, rng: &mut impl RngCore) -> bool {
        match self.spec {
            LossSpec::Bernoulli(p) => p > 0.0 && bernoulli(rng, p),
            LossSpec::GilbertElliott(GilbertElliott { good_to_bad, bad_to_good, loss_good, loss_bad }) => {
                let loss = if self.in_bad_state { loss_bad } else { loss_good };
                let dropped = bernoulli(rng, loss);
                let switch = if self.in_bad_state { bad_to_good } else { good_to_bad };
                if bernoulli(rng, switch) {
                    self.in_bad_state = !self.in_bad_state;
                }
                dropped
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::{rng, Stream};

    fn measured_loss(spec: LossSpec, packets: u32) -> (f64, Vec<u32>) {
        let mut model = LossModel::new(spec);
        let mut r = rng(3, Stream::LossAb);
        let mut lost = 0u32;
        let mut bursts = Vec::new();
        let mut run = 0;
        for _ in 0..packets {
            if model.drops_next(&mut r) {
                lost += 1;
                run += 1;
            } else if run > 0 {
                bursts.push(run);
                run = 0;
            }
        }
        (f64::from(lost) / f64::from(packets), bursts)
    }

    #[test]
    fn bernoulli_matches_its_rate_and_extremes() {
        let (loss, _) = measured_loss(LossSpec::Bernoulli(0.05), 200_000);
        assert!((loss - 0.05).abs() < 0.003, "loss {loss}");
        assert_eq!(measured_loss(LossSpec::Bernoulli(0.0), 10_000).0, 0.0);
        assert_eq!(measured_loss(LossSpec::Bernoulli(1.0), 10_000).0, 1.0);
    }

    #[test]
    fn gilbert_elliott_mean_loss_matches_the_stationary_formula_and_is_bursty() {
        let ge = GilbertElliott { good_to_bad: 0.01, bad_to_good: 0.1, loss_good: 0.0, loss_bad: 0.5 };
        // Stationary P(bad) = p / (p + r) = 1/11, so the mean loss is 0.5 / 11 = 4.55%.
        assert!((ge.mean_loss() - 0.5 / 11.0).abs() < 1e-12);
        let (loss, bursts) = measured_loss(LossSpec::GilbertElliott(ge), 400_000);
        assert!((loss - ge.mean_loss()).abs() < 0.004, "loss {loss}");
        // Losses cluster: bursts of 2 or more are far more common than under Bernoulli loss at the same rate.
        let long = bursts.iter().filter(|&&b| b >= 2).count() as f64 / bursts.len() as f64;
        assert!(long > 0.2, "fraction of bursts >= 2: {long}");
    }
}
