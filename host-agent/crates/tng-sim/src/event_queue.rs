//! The simulator's agenda: events ordered by virtual time, ties broken by insertion order.
//!
//! The insertion sequence number makes the order total, so two runs with the same seed process simultaneous events
//! in the same order and produce identical results.
//!
//! Lanes keep the heap small. The engine schedules each packet in the lane of the link it crosses; an event no earlier
//! than its lane's latest one waits in the lane's FIFO, and only the lane's first event is in the heap, so a link that
//! delivers in order costs one heap entry however many packets it carries. An event that would overtake its lane's
//! latest one (a link that reorders) takes its own heap entry. Events come out in the same (time, sequence) order as
//! if each had its own entry: every FIFO is sorted by that key and its smallest element is in the heap.

use std::cmp::Ordering;
use std::collections::binary_heap::PeekMut;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

struct Scheduled<E> {
    at: Duration,
    sequence: u64,
    /// The lane whose first event this is: taking it out brings the lane's next event into the heap.
    lane: Option<usize>,
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

struct Lane<E> {
    /// Whether the lane's first event is in the heap (the lane holds events).
    head_in_heap: bool,
    /// Events behind the first, in (time, sequence) order.
    waiting: VecDeque<Scheduled<E>>,
    /// Time of the lane's latest event: a later event may queue behind it without overtaking it.
    last_at: Duration,
}

impl<E> Default for Lane<E> {
    fn default() -> Self {
        Lane { head_in_heap: false, waiting: VecDeque::new(), last_at: Duration::ZERO }
    }
}

/// A priority queue of events keyed by (time since the start of the run, insertion sequence).
pub struct EventQueue<E> {
    heap: BinaryHeap<Scheduled<E>>,
    /// Indexed by lane number (the engine uses link indices).
    lanes: Vec<Lane<E>>,
    /// Events waiting in lanes, outside the heap.
    waiting: usize,
    next_sequence: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue { heap: BinaryHeap::new(), lanes: Vec::new(), waiting: 0, next_sequence: 0 }
    }
}

impl<E> EventQueue<E> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn schedule(&mut self, at: Duration, event: E) {
        let sequence = self.take_sequence();
        self.heap.push(Scheduled { at, sequence, lane: None, event });
    }

    /// Schedules an event in lane `lane`: it waits behind the lane's earlier events unless it would overtake them.
    pub fn schedule_in_lane(&mut self, lane: usize, at: Duration, event: E) {
        let sequence = self.take_sequence();
        if self.lanes.len() <= lane {
            self.lanes.resize_with(lane + 1, Lane::default);
        }
        let state = &mut self.lanes[lane];
        if !state.head_in_heap {
            state.head_in_heap = true;
            state.last_at = at;
            self.heap.push(Scheduled { at, sequence, lane: Some(lane), event });
        } else if at >= state.last_at {
            // Its sequence is the largest so far, so an equal time also sorts it last.
            state.last_at = at;
            state.waiting.push_back(Scheduled { at, sequence, lane: Some(lane), event });
            self.waiting += 1;
        } else {
            self.heap.push(Scheduled { at, sequence, lane: None, event });
        }
    }

    /// The earliest event, if any, with its time.
    pub fn pop(&mut self) -> Option<(Duration, E)> {
        let mut first = self.heap.peek_mut()?;
        if let Some(lane) = first.lane {
            let state = &mut self.lanes[lane];
            match state.waiting.pop_front() {
                Some(next) => {
                    self.waiting -= 1;
                    // Replacing the top in place costs one sift instead of a pop and a push.
                    let taken = std::mem::replace(&mut *first, next);
                    return Some((taken.at, taken.event));
                }
                None => state.head_in_heap = false,
            }
        }
        let taken = PeekMut::pop(first);
        Some((taken.at, taken.event))
    }

    pub fn peek_time(&self) -> Option<Duration> {
        self.heap.peek().map(|scheduled| scheduled.at)
    }

    /// Events scheduled and not yet popped.
    pub fn len(&self) -> usize {
        self.heap.len() + self.waiting
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Entries in the heap: one per lane that holds events, plus every event scheduled outside a lane or out of its
    /// lane's order. What a pop and a push cost grows with it.
    pub fn heap_entries(&self) -> usize {
        self.heap.len()
    }

    fn take_sequence(&mut self) -> u64 {
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        sequence
    }
}
