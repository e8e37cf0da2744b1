//! The connection's qlog emission helpers for events built from channel state (metrics, losses, controller
//! changes); each returns at once when tracing is off.

use std::net::SocketAddr;
use std::time::Duration;

use tng_wire::{parse_frames, Frame, PacketType};

use super::loss::{SentPacket, PACKET_THRESHOLD};
use super::Connection;
use crate::qlog::{LossTrigger, Metrics, MigrationState, QlogEvent};
use crate::time::Time;

impl Connection {
    /// The flow state of channel `id` after an ACK or a loss.
    #[inline]
    pub(super) fn trace_metrics(&mut self, now: Time, id: u8, latest_rtt: Option<Duration>) {
        if self.qlog.is_on() {
            self.emit_metrics(now, id, latest_rtt);
        }
    }

    #[cold]
    fn emit_metrics(&mut self, now: Time, id: u8, latest_rtt: Option<Duration>) {
        let mtu = self.max_datagram_size();
        let Some(channel) = self.channels.get(&id) else { return };
        let metrics = Metrics {
            channel: id,
            cwnd: channel.cc.window(),
            bytes_in_flight: channel.recovery.bytes_in_flight(),
            smoothed_rtt: channel.rtt.smoothed(),
            min_rtt: channel.rtt.min(),
            rtt_variance: channel.rtt.variance(),
            latest_rtt,
            pacing_rate: channel.pacing_rate(mtu),
            congestion_state: channel.cc.state(),
        };
        if let Some(sink) = self.qlog.sink() {
            sink.emit(now, &QlogEvent::MetricsUpdated(metrics));
        }
    }

    /// A sealed packet left: its frames are parsed back from the plaintext (only when tracing).
    #[cold]
    pub(super) fn trace_sent(&mut self, now: Time, sent: (u8, PacketType, u64), length: usize, plaintext: &[u8]) {
        let (channel, packet_type, packet_number) = sent;
        if let Some(sink) = self.qlog.sink() {
            let frames: Vec<Frame<'_>> = parse_frames(plaintext).filter_map(Result::ok).collect();
            sink.emit(now, &QlogEvent::PacketSent { channel, packet_type, packet_number, length, frames: &frames });
        }
    }

    /// Packets of channel `id` declared lost; `trigger` is `None` for the loss detector's verdict, whose threshold
    /// is told apart by the largest acknowledged number.
    #[inline]
    pub(super) fn trace_lost(&mut self, now: Time, id: u8, lost: &[SentPacket], trigger: Option<LossTrigger>) {
        if self.qlog.is_on() {
            self.emit_lost(now, id, lost, trigger);
        }
    }

    #[cold]
    fn emit_lost(&mut self, now: Time, id: u8, lost: &[SentPacket], trigger: Option<LossTrigger>) {
        let largest_acked = self.channels.get(&id).and_then(|channel| channel.recovery.largest_acked());
        let Some(sink) = self.qlog.sink() else { return };
        for packet in lost {
            let packet_number = packet.packet_number;
            let trigger = trigger.unwrap_or(match largest_acked {
                Some(largest) if largest >= packet_number + PACKET_THRESHOLD => LossTrigger::ReorderingThreshold,
                _ => LossTrigger::TimeThreshold,
            });
            sink.emit(now, &QlogEvent::PacketLost { channel: id, packet_number, trigger });
        }
    }

    /// Channel `id` started a fresh congestion controller.
    #[cold]
    pub(super) fn trace_controller(&mut self, now: Time, id: u8, trigger: &'static str) {
        let Some(controller) = self.channels.get(&id).map(|channel| channel.cc.name()) else { return };
        if let Some(sink) = self.qlog.sink() {
            sink.emit(now, &QlogEvent::ControllerUpdated { channel: id, controller, trigger });
        }
    }

    #[cold]
    pub(super) fn trace_migration(&mut self, now: Time, id: u8, state: MigrationState, path: (SocketAddr, SocketAddr)) {
        if let Some(sink) = self.qlog.sink() {
            let (local, remote) = path;
            sink.emit(now, &QlogEvent::MigrationStateUpdated { channel: id, state, local, remote });
        }
    }
}
