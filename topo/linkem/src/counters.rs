//! Per-direction counters, written by the forwarding thread and read by the control socket without locking.
//!
//! Byte counts are IP bytes (the frame minus its 14-byte Ethernet header), the same bytes the rate is charged on.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

#[derive(Debug, Default)]
pub struct DirectionCounters {
    pub packets_in: AtomicU64,
    pub bytes_in: AtomicU64,
    pub forwarded_packets: AtomicU64,
    pub forwarded_bytes: AtomicU64,
    /// Dropped because the queue was full (drop-tail).
    pub dropped_queue: AtomicU64,
    /// Dropped by the loss model.
    pub dropped_loss: AtomicU64,
    /// The egress interface refused the frame (for example larger than its MTU).
    pub dropped_send: AtomicU64,
    /// Frames larger than the receive buffer: a sign that offloads (GRO) are on.
    pub dropped_oversize: AtomicU64,
    /// Frames the kernel dropped because linkem's receive socket was full.
    pub dropped_kernel: AtomicU64,
    pub ecn_marked: AtomicU64,
    /// Frames whose TCP or UDP checksum linkem computed because the sender left it to checksum offload.
    pub checksum_completed: AtomicU64,
    /// Current bottleneck queue, including the packet being served.
    pub queue_packets: AtomicU64,
    pub queue_bytes: AtomicU64,
    /// Packets past the bottleneck and waiting out their propagation delay.
    pub delay_line_packets: AtomicU64,
}

/// A point-in-time copy, serialised as the control socket's `counters` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CountersSnapshot {
    pub packets_in: u64,
    pub bytes_in: u64,
    pub forwarded_packets: u64,
    pub forwarded_bytes: u64,
    pub dropped_queue: u64,
    pub dropped_loss: u64,
    pub dropped_send: u64,
    pub dropped_oversize: u64,
    pub dropped_kernel: u64,
    pub ecn_marked: u64,
    pub checksum_completed: u64,
    pub queue_packets: u64,
    pub queue_bytes: u64,
    pub delay_line_packets: u64,
}

/// Adds to a counter; only the forwarding thread writes, so relaxed ordering is enough.
pub fn add(counter: &AtomicU64, amount: u64) {
    counter.fetch_add(amount, Ordering::Relaxed);
}

pub fn set(gauge: &AtomicU64, value: u64) {
    gauge.store(value, Ordering::Relaxed);
}

impl DirectionCounters {
    pub fn snapshot(&self) -> CountersSnapshot {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        CountersSnapshot {
            packets_in: read(&self.packets_in),
            bytes_in: read(&self.bytes_in),
            forwarded_packets: read(&self.forwarded_packets),
            forwarded_bytes: read(&self.forwarded_bytes),
            dropped_queue: read(&self.dropped_queue),
            dropped_loss: read(&self.dropped_loss),
            dropped_send: read(&self.dropped_send),
            dropped_oversize: read(&self.dropped_oversize),
            dropped_kernel: read(&self.dropped_kernel),
            ecn_marked: read(&self.ecn_marked),
            checksum_completed: read(&self.checksum_completed),
            queue_packets: read(&self.queue_packets),
            queue_bytes: read(&self.queue_bytes),
            delay_line_packets: read(&self.delay_line_packets),
        }
    }
}
