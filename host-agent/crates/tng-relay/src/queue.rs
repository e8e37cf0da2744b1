//! The relay's bounded per-section queue: the last router of the upstream section (queue sharing).

use std::collections::VecDeque;

use tng_proto::Time;

/// A packet waiting for the downstream section, with the upstream packet number to acknowledge once it leaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Queued {
    pub(crate) upstream_pn: u64,
    pub(crate) arrived: Time,
    pub(crate) inner: Vec<u8>,
}

/// The queue was at its bound: the packet is dropped and, being unacknowledged, lost to the upstream section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueFull;

/// A FIFO bounded in packets (the bound comes from the relay's policy).
#[derive(Debug, Clone)]
pub struct SectionQueue {
    limit: usize,
    packets: VecDeque<Queued>,
}

impl SectionQueue {
    /// An empty queue holding at most `limit` packets (at least one).
    pub fn new(limit: usize) -> Self {
        Self { limit: limit.max(1), packets: VecDeque::new() }
    }

    /// Packets waiting.
    pub fn len(&self) -> usize {
        self.packets.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.packets.is_empty()
    }

    pub(crate) fn push(&mut self, packet: Queued) -> Result<(), QueueFull> {
        if self.packets.len() >= self.limit {
            return Err(QueueFull);
        }
        self.packets.push_back(packet);
        Ok(())
    }

    pub(crate) fn front(&self) -> Option<&Queued> {
        self.packets.front()
    }

    pub(crate) fn pop(&mut self) -> Option<Queued> {
        self.packets.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued(upstream_pn: u64) -> Queued {
        Queued { upstream_pn, arrived: Time::ZERO, inner: vec![upstream_pn as u8] }
    }

    #[test]
    fn keeps_order_and_refuses_past_its_bound() {
        let mut queue = SectionQueue::new(2);
        assert_eq!(queue.push(queued(1)), Ok(()));
        assert_eq!(queue.push(queued(2)), Ok(()));
        assert_eq!(queue.push(queued(3)), Err(QueueFull));
        assert_eq!(queue.len(), 2);
        assert_eq!(queue.pop().map(|q| q.upstream_pn), Some(1));
        assert_eq!(queue.push(queued(4)), Ok(()));
        assert_eq!(queue.pop().map(|q| q.upstream_pn), Some(2));
        assert_eq!(queue.pop().map(|q| q.upstream_pn), Some(4));
        assert!(queue.is_empty());
    }
}
