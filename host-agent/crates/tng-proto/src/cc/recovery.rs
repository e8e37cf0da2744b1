//! The recovery period: one congestion response per episode.

use crate::time::Time;

/// A loss, ECN-CE mark or queue report about a packet sent before the current recovery period began belongs to the
/// congestion episode the controller already answered, so it must not cut the window again (RFC 9002 section 7.3.2,
/// RFC 6582).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RecoveryPeriod {
    start: Option<Time>,
}

impl RecoveryPeriod {
    /// Whether a packet sent at `sent_time` left during the current recovery period (its ACK must not grow the
    /// window, and a signal about it must not cut it).
    pub(crate) fn covers(&self, sent_time: Time) -> bool {
        self.start.is_some_and(|start| sent_time <= start)
    }

    /// Starts a new recovery period at `now` for a congestion signal about a packet sent at `sent_time`, unless the
    /// current period covers it. Returns whether the controller should respond.
    pub(crate) fn enter(&mut self, now: Time, sent_time: Time) -> bool {
        if self.covers(sent_time) {
            return false;
        }
        self.start = Some(now);
        true
    }

    /// Persistent congestion: the window already collapsed, so the next signal starts a new episode.
    pub(crate) fn reset(&mut self) {
        self.start = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_response_per_episode() {
        let mut recovery = RecoveryPeriod::default();
        assert!(!recovery.covers(Time::ZERO));
        assert!(recovery.enter(Time::from_millis(100), Time::from_millis(50)));
        assert!(recovery.covers(Time::from_millis(100)));
        assert!(!recovery.enter(Time::from_millis(120), Time::from_millis(90)));
        assert!(!recovery.covers(Time::from_millis(101)));
        assert!(recovery.enter(Time::from_millis(300), Time::from_millis(101)));
        recovery.reset();
        assert!(recovery.enter(Time::from_millis(310), Time::from_millis(200)));
    }
}
