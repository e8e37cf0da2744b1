//! Application-level accounting shared by the client and server applications of a run.

use std::time::Duration;

use crate::metrics::{DeliveryTimeline, GoodputMeter, StallTracker};

/// Resolution of the delivery timeline.
pub const TIMELINE_INTERVAL: Duration = Duration::from_millis(100);

/// Everything the applications measure.
#[derive(Clone, Debug)]
pub struct Ledger {
    pub bytes_sent: u64,
    pub bytes_delivered: u64,
    pub bytes_corrupted: u64,
    pub flow_completion_times: Vec<Duration>,
    pub burst_completion_times: Vec<Duration>,
    /// Per client.
    pub goodput: Vec<GoodputMeter>,
    /// Per client: when its last planned transfer finished.
    pub finished_at: Vec<Option<Duration>>,
    pub stall: StallTracker,
    /// Every client's deliveries together, over time.
    pub timeline: DeliveryTimeline,
    /// Connections the clients opened.
    pub handshakes: u64,
    /// Connections that failed or closed while a transfer on them was unfinished.
    pub failed_connections: u64,
    /// Streams the peer reset, or requests the server could not parse.
    pub failed_transfers: u64,
}

impl Ledger {
    pub fn new(clients: usize, measure_after: Duration) -> Ledger {
        Ledger {
            bytes_sent: 0,
            bytes_delivered: 0,
            bytes_corrupted: 0,
            flow_completion_times: Vec::new(),
            burst_completion_times: Vec::new(),
            goodput: vec![GoodputMeter::new(measure_after); clients],
            finished_at: vec![None; clients],
            stall: StallTracker::default(),
            timeline: DeliveryTimeline::new(TIMELINE_INTERVAL),
            handshakes: 0,
            failed_connections: 0,
            failed_transfers: 0,
        }
    }

    /// The server application handed response bytes to its connection.
    pub fn on_written(&mut self, now: Duration, bytes: u64) {
        self.bytes_sent += bytes;
        self.stall.on_written(now, bytes);
    }

    /// A client application read response bytes, `corrupted` of which differ from what was sent.
    pub fn on_delivered(&mut self, now: Duration, client: usize, bytes: u64, corrupted: u64) {
        self.bytes_delivered += bytes;
        self.bytes_corrupted += corrupted;
        self.goodput[client].on_delivered(now, bytes);
        self.timeline.on_delivered(now, bytes);
        self.stall.on_delivered(now, bytes);
    }
}
