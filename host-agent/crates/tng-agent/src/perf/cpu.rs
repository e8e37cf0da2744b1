//! CPU time of this process, for the perf report's `cpu_percent`.

use std::time::Instant;

/// Process CPU time (user + system) against wall time since `start`.
pub struct CpuClock {
    wall: Instant,
    cpu_seconds: f64,
}

impl CpuClock {
    pub fn start() -> CpuClock {
        CpuClock { wall: Instant::now(), cpu_seconds: process_cpu_seconds() }
    }

    /// Percent of one core used since `start` (200 = two cores busy).
    pub fn percent(&self) -> f64 {
        let wall = self.wall.elapsed().as_secs_f64();
        if wall <= 0.0 {
            return 0.0;
        }
        (process_cpu_seconds() - self.cpu_seconds) / wall * 100.0
    }
}

fn process_cpu_seconds() -> f64 {
    // /proc/self/stat fields 14 and 15 are utime and stime in clock ticks (USER_HZ, 100 on Linux).
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    let Some(after_name) = stat.rsplit_once(')').map(|(_, rest)| rest) else {
        return 0.0;
    };
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // After the name, field 3 of the man page is index 0 here: utime is field 14 -> index 11.
    (ticks(11) + ticks(12)) / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn busy_work_advances_cpu_time_and_percent() {
        // Other processes may share the cores, so wait for CPU time rather than wall time.
        let clock = CpuClock::start();
        let before = process_cpu_seconds();
        let give_up = Instant::now() + Duration::from_secs(20);
        let mut x = 0u64;
        while process_cpu_seconds() - before < 0.2 {
            assert!(Instant::now() < give_up, "CPU time did not advance: /proc/self/stat not parsed");
            for _ in 0..100_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
        }
        assert!(x != 1);
        let percent = clock.percent();
        // The process's other test threads count too, so it may use every core; a quarter more covers the clock
        // ticks (10 ms) the CPU time is counted in.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        assert!(percent > 0.0 && percent <= 125.0 * cores, "cpu_percent {percent} out of range");
    }
}
