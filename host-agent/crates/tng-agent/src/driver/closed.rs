//! Why recent connections closed, for requests that name a connection after it is gone. Bounded: a server that sees
//! millions of connections keeps the reasons of the last [`ClosedReasons::CAPACITY`] only, not one per connection
//! for its whole life.

use std::collections::{HashMap, VecDeque};

use tng_proto::ConnectionHandle;

#[derive(Default)]
pub struct ClosedReasons {
    reasons: HashMap<ConnectionHandle, String>,
    /// Oldest first: the one forgotten when a new reason would exceed the capacity.
    order: VecDeque<ConnectionHandle>,
}

impl ClosedReasons {
    pub const CAPACITY: usize = 1024;

    pub fn insert(&mut self, conn: ConnectionHandle, reason: String) {
        if self.reasons.insert(conn, reason).is_none() {
            self.order.push_back(conn);
        }
        while self.order.len() > Self::CAPACITY {
            if let Some(oldest) = self.order.pop_front() {
                self.reasons.remove(&oldest);
            }
        }
    }

    pub fn get(&self, conn: ConnectionHandle) -> Option<&str> {
        self.reasons.get(&conn).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_latest_reasons_and_forgets_the_oldest_beyond_capacity() {
        let mut closed = ClosedReasons::default();
        let total = ClosedReasons::CAPACITY as u64 + 10;
        for n in 0..total {
            closed.insert(ConnectionHandle(n), format!("reason {n}"));
        }
        assert_eq!(closed.get(ConnectionHandle(9)), None);
        assert_eq!(closed.get(ConnectionHandle(10)), Some("reason 10"));
        assert_eq!(closed.get(ConnectionHandle(total - 1)), Some(format!("reason {}", total - 1).as_str()));
        assert_eq!(closed.reasons.len(), ClosedReasons::CAPACITY);
    }

    #[test]
    fn a_second_reason_for_one_connection_replaces_the_first_without_taking_a_slot() {
        let mut closed = ClosedReasons::default();
        closed.insert(ConnectionHandle(1), "idle".into());
        closed.insert(ConnectionHandle(1), "reset".into());
        assert_eq!(closed.get(ConnectionHandle(1)), Some("reset"));
        assert_eq!(closed.order.len(), 1);
    }
}
