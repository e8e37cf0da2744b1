//! The simulator's agenda: events ordered by virtual time, ties broken by insertion order.
//!
//! The insertion sequence number makes the order total, so two runs with the same seed process simultaneous events
//! in the same order and produce identical results.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::Duration;

struct Scheduled<E> {
    at: Duration,
    sequence: u64,
    event: E,
}

impl<E> PartialEq for Scheduled<E> {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at && self.sequence == other.sequence
    }
}

impl<E> Eq for Scheduled<E> {}

impl<E> PartialOrd for Scheduled<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<E> Ord for Scheduled<E> {
    /// Reversed: `BinaryHeap` is a max-heap and the earliest event must come out first.
    fn cmp(&self, other: &Self) -> Ordering {
        other.at.cmp(&self.at).then_with(|| other.sequence.cmp(&self.sequence))
    }
}

/// A priority queue of events keyed by (time since the start of the run, insertion sequence).
pub struct EventQueue<E> {
    heap: BinaryHeap<Scheduled<E>>,
    next_sequence: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue { heap: BinaryHeap::new(), next_sequence: 0 }
    }
}

impl<E> EventQueue<E> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn schedule(&mut self, at: Duration, event: E) {
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        self.heap.push(Scheduled { at, sequence, event });
    }

    /// The earliest event, if any, with its time.
    pub fn pop(&mut self) -> Option<(Duration, E)> {
        self.heap.pop().map(|scheduled| (scheduled.at, scheduled.event))
    }

    pub fn peek_time(&self) -> Option<Duration> {
        self.heap.peek().map(|scheduled| scheduled.at)
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}
