//! CPU time of the simulating thread, for the cost of the events after warm-up: on a shared machine the wall clock
//! also counts other processes' turns, and a run's total mixes handshakes and slow starts with steady state.

use std::time::Duration;

/// The time this thread has run on a CPU (the first field of Linux's `/proc/thread-self/schedstat`, nanoseconds);
/// `None` where the kernel does not provide it.
pub fn thread_cpu_time() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let nanos = text.split_whitespace().next()?.parse::<u64>().ok()?;
    Some(Duration::from_nanos(nanos))
}

/// The events processed and the CPU time spent from the moment virtual time reached the measurement's start.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SteadyCost {
    pub events: u64,
    pub cpu: Duration,
}

/// Marks where the measured part of a run begins and ends.
#[derive(Debug)]
pub struct SteadyMeter {
    from: Duration,
    start: Option<(u64, Option<Duration>)>,
}

impl SteadyMeter {
    /// A meter that starts when virtual time reaches `from`.
    pub fn new(from: Duration) -> SteadyMeter {
        SteadyMeter { from, start: None }
    }

    /// Called before each event: the first event at or after `from` starts the measurement (`events` before it).
    pub fn on_event(&mut self, at: Duration, events: u64) {
        if self.start.is_none() && at >= self.from {
            self.start = Some((events, thread_cpu_time()));
        }
    }

    /// The cost from the start to now, `events` having been processed in all; none if the measurement never
    /// started or CPU time cannot be read.
    pub fn finish(&self, events: u64) -> Option<SteadyCost> {
        let (events_before, Some(cpu_before)) = self.start? else { return None };
        let cpu = thread_cpu_time()?.saturating_sub(cpu_before);
        Some(SteadyCost { events: events - events_before, cpu })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_clock_advances_with_work() {
        let before = thread_cpu_time().expect("Linux provides /proc/thread-self/schedstat");
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
        std::hint::black_box(x);
        // The kernel adds a running thread's time at ticks and switches, so a loop between two ticks may not show
        // yet; going to sleep is a switch.
        std::thread::sleep(Duration::from_millis(2));
        // 20 million dependent multiplications take far more than a millisecond on any CPU.
        assert!(thread_cpu_time().unwrap() >= before + Duration::from_millis(1));
    }

    #[test]
    fn a_meter_counts_the_events_from_its_start_only() {
        let mut meter = SteadyMeter::new(Duration::from_secs(2));
        meter.on_event(Duration::from_secs(1), 10);
        assert_eq!(meter.finish(11), None, "not started before virtual time reaches 2 s");
        meter.on_event(Duration::from_secs(2), 11);
        meter.on_event(Duration::from_secs(3), 12);
        assert_eq!(meter.finish(40).map(|cost| cost.events), Some(29));
    }
}
