//! What each client asks for and when: drawn up front from the scenario and the seed, so every mode of a
//! comparison fetches exactly the same responses.

use std::collections::VecDeque;
use std::time::Duration;

use crate::rng::SimRng;
use crate::scenario::{SizeSpec, WorkloadSpec};

/// Response size meaning "keep sending until the run ends".
pub const UNBOUNDED: u64 = u64::MAX;

/// One client's plan.
#[derive(Clone, Debug, PartialEq)]
pub struct ClientPlan {
    /// Requesters run concurrently; each fetches its responses one after the other.
    pub requesters: Vec<VecDeque<u64>>,
    /// Bursts: (start time, response size), started on schedule whether or not the previous one has finished.
    pub bursts: Vec<(Duration, u64)>,
}

impl ClientPlan {
    pub fn total_flows(&self) -> usize {
        self.requesters.iter().map(VecDeque::len).sum::<usize>() + self.bursts.len()
    }
}

/// Draws the plan of client `client` for a run seeded with `seed`.
pub fn plan_client(workload: &WorkloadSpec, client: usize, seed: u64) -> ClientPlan {
    let mut rng = SimRng::for_component(seed, &format!("client{client}/workload"));
    match workload {
        WorkloadSpec::Bulk { bytes } => {
            ClientPlan { requesters: vec![VecDeque::from([bytes.unwrap_or(UNBOUNDED)])], bursts: Vec::new() }
        }
        WorkloadSpec::ShortFlows { parallel, flows_per_requester, size } => ClientPlan {
            requesters: (0..*parallel)
                .map(|_| (0..*flows_per_requester).map(|_| draw_size(size, &mut rng)).collect())
                .collect(),
            bursts: Vec::new(),
        },
        WorkloadSpec::Bursts { burst_bytes, interval_ms, count } => ClientPlan {
            requesters: Vec::new(),
            bursts: (0..*count)
                .map(|index| (Duration::from_secs_f64(interval_ms * (index + 1) as f64 / 1000.0), *burst_bytes))
                .collect(),
        },
    }
}

fn draw_size(size: &SizeSpec, rng: &mut SimRng) -> u64 {
    let bytes = match *size {
        SizeSpec::Fixed { bytes } => return bytes,
        SizeSpec::Exponential { mean_bytes } => rng.exponential(mean_bytes),
        SizeSpec::Pareto { mean_bytes, shape } => rng.pareto(mean_bytes * (shape - 1.0) / shape, shape),
    };
    (bytes.round() as u64).max(1)
}
