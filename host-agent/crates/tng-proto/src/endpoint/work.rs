//! Which connections have work: the ones that may have a datagram to send, in turn order, and every connection's
//! next deadline in time order. The endpoint feeds both whenever it calls into a connection, so that sending and
//! timers touch only the connections concerned, at O(log n) per connection and event for n connections held.

use std::collections::{BTreeSet, VecDeque};

use crate::connection::ConnectionHandle;
use crate::time::Time;

/// What [`Work`] holds for one connection; kept next to the connection so that checking it costs no lookup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Marks {
    /// In the send queue.
    queued: bool,
    /// Handed to the application since the endpoint last looked at it.
    touched: bool,
    /// The deadline registered, if any.
    deadline: Option<Time>,
}

#[derive(Debug, Default)]
pub(super) struct Work {
    /// Connections that may have a datagram to send, each once, in the order they take turns.
    sendable: VecDeque<ConnectionHandle>,
    deadlines: BTreeSet<(Time, ConnectionHandle)>,
    /// Connections the application may have changed, looked at before the endpoint next answers a poll.
    touched: Vec<ConnectionHandle>,
}

impl Work {
    /// The connection may have something to send: it joins the end of the queue unless already in it.
    pub(super) fn queue(&mut self, handle: ConnectionHandle, marks: &mut Marks) {
        if !marks.queued {
            marks.queued = true;
            self.sendable.push_back(handle);
        }
    }

    /// The connection whose turn it is to send; its marks must be passed to [`Work::dequeued`]. A handle may belong
    /// to a connection since dropped (handles are never reused).
    pub(super) fn next_sendable(&mut self) -> Option<ConnectionHandle> {
        self.sendable.pop_front()
    }

    pub(super) fn dequeued(marks: &mut Marks) {
        marks.queued = false;
    }

    /// The application got hold of the connection: it may have written, read or closed.
    pub(super) fn touch(&mut self, handle: ConnectionHandle, marks: &mut Marks) {
        if !marks.touched {
            marks.touched = true;
            self.touched.push(handle);
        }
    }

    /// The connections touched since the last call; their marks must be passed to [`Work::looked_at`].
    pub(super) fn take_touched(&mut self) -> Vec<ConnectionHandle> {
        std::mem::take(&mut self.touched)
    }

    pub(super) fn looked_at(marks: &mut Marks) {
        marks.touched = false;
    }

    /// Records the connection's next deadline (replacing the one registered before).
    pub(super) fn set_deadline(&mut self, handle: ConnectionHandle, marks: &mut Marks, deadline: Option<Time>) {
        if marks.deadline == deadline {
            return;
        }
        if let Some(old) = marks.deadline {
            self.deadlines.remove(&(old, handle));
        }
        if let Some(new) = deadline {
            self.deadlines.insert((new, handle));
        }
        marks.deadline = deadline;
    }

    /// The earliest deadline of any connection.
    pub(super) fn next_deadline(&self) -> Option<Time> {
        self.deadlines.first().map(|&(at, _)| at)
    }

    /// Removes and returns the connections whose deadline is at or before `now`, earliest first; their marks must
    /// be passed to [`Work::fired`]. Taken all at once so that a deadline a connection sets while being run waits for
    /// the next call.
    pub(super) fn take_due(&mut self, now: Time) -> Vec<ConnectionHandle> {
        let mut due = Vec::new();
        while let Some(&(at, handle)) = self.deadlines.first() {
            if at > now {
                break;
            }
            self.deadlines.pop_first();
            due.push(handle);
        }
        due
    }

    pub(super) fn fired(marks: &mut Marks) {
        marks.deadline = None;
    }

    /// Forgets a connection that is dropped (a stale handle left in the send queue is skipped when its turn comes).
    pub(super) fn forget(&mut self, handle: ConnectionHandle, marks: &mut Marks) {
        self.set_deadline(handle, marks, None);
    }

    /// Entries held: at most one per connection in each structure.
    #[cfg(test)]
    fn len(&self) -> (usize, usize) {
        (self.sendable.len(), self.deadlines.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(n: u64) -> ConnectionHandle {
        ConnectionHandle(n)
    }

    #[test]
    fn a_connection_queued_twice_takes_one_turn() {
        let mut work = Work::default();
        let (mut a, mut b) = (Marks::default(), Marks::default());
        work.queue(handle(1), &mut a);
        work.queue(handle(2), &mut b);
        work.queue(handle(1), &mut a);
        assert_eq!(work.next_sendable(), Some(handle(1)));
        Work::dequeued(&mut a);
        work.queue(handle(1), &mut a);
        assert_eq!(work.next_sendable(), Some(handle(2)));
        assert_eq!(work.next_sendable(), Some(handle(1)));
        assert_eq!(work.next_sendable(), None);
    }

    #[test]
    fn only_due_deadlines_are_taken_and_a_moved_deadline_leaves_no_trace() {
        let mut work = Work::default();
        let mut marks = [Marks::default(); 3];
        work.set_deadline(handle(0), &mut marks[0], Some(Time::from_millis(30)));
        work.set_deadline(handle(1), &mut marks[1], Some(Time::from_millis(10)));
        work.set_deadline(handle(2), &mut marks[2], Some(Time::from_millis(50)));
        // Connection 0 moves its deadline earlier, then later again; only the last one counts.
        work.set_deadline(handle(0), &mut marks[0], Some(Time::from_millis(5)));
        work.set_deadline(handle(0), &mut marks[0], Some(Time::from_millis(40)));
        assert_eq!(work.len(), (0, 3));
        assert_eq!(work.next_deadline(), Some(Time::from_millis(10)));
        assert_eq!(work.take_due(Time::from_millis(40)), vec![handle(1), handle(0)]);
        Work::fired(&mut marks[1]);
        Work::fired(&mut marks[0]);
        assert_eq!(work.next_deadline(), Some(Time::from_millis(50)));
        // A fired connection that asks for the same deadline again gets it registered anew.
        work.set_deadline(handle(0), &mut marks[0], Some(Time::from_millis(40)));
        assert_eq!(work.next_deadline(), Some(Time::from_millis(40)));
        work.forget(handle(0), &mut marks[0]);
        work.set_deadline(handle(2), &mut marks[2], None);
        assert_eq!(work.next_deadline(), None);
    }
}
