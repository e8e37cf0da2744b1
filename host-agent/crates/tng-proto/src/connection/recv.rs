//! Receiving sealed packets: expand the packet number, check the replay window, open, check the frames, and only
//! then change state (a forged, tampered or replayed packet changes nothing); then dispatch each frame to its layer.

use std::net::SocketAddr;

use tng_wire::{parse_frames, AckFrame, Feedback, Frame, Packet, PacketType, PathStatus};

use super::channel::{AmplificationBudget, Challenge, ChannelState, Response};
use super::crypto::packet_nonce;
use super::loss::SentPacket;
use super::received::EcnCodepoint;
use super::{Connection, Event, State};
use crate::cc::{AckSample, DeliveryForecast, LossEvent, PathFeedback};
use crate::config::TailLossMode;
use crate::endpoint::DropReason;
use crate::error::ConnectionError;
use crate::qlog::{LossTrigger, MigrationState, QlogEvent};
use crate::streams::Side;
use crate::time::Time;

/// PATH_RESPONSEs queued per channel at most: more challenges than that in one round trip are not answered.
const MAX_PENDING_RESPONSES: usize = 4;

/// Which frames each sealed packet type may carry (wire-format section 3).
fn frame_allowed(packet_type: PacketType, frame: &Frame<'_>) -> bool {
    match packet_type {
        PacketType::Data => true,
        PacketType::Ack => matches!(
            frame,
            Frame::Ack(_) | Frame::FeedbackEcho { .. } | Frame::DeliveryForecast { .. } | Frame::Padding(_)
        ),
        PacketType::Probe => {
            matches!(frame, Frame::PathChallenge(_) | Frame::PathResponse(_) | Frame::Padding(_))
        }
        PacketType::Close => matches!(frame, Frame::Close { .. } | Frame::Padding(_)),
        PacketType::Initial | PacketType::Retry | PacketType::Section | PacketType::SectionAck => false,
    }
}

impl Connection {
    /// A DATA, ACK, PROBE or CLOSE packet for this connection.
    pub(crate) fn handle_sealed(
        &mut self,
        now: Time,
        (local, remote): (SocketAddr, SocketAddr),
        ecn: Option<EcnCodepoint>,
        packet: &Packet<'_>,
        datagram_len: usize,
    ) -> Result<(), DropReason> {
        match self.state {
            State::Draining { .. } | State::Drained => return Err(DropReason::Draining),
            State::ClientHello(_) | State::ClientFinishDue(_) | State::ServerHello(_) => {
                return Err(DropReason::NotEstablished)
            }
            State::Established | State::Closing { .. } => {}
        }
        let header = packet.header();
        let sealed = packet.payload.sealed().ok_or(DropReason::Unexpected)?;
        let id = packet.channel_id;
        let known = self.channels.get(&id);
        if known.is_none() {
            if self.side == Side::Client || self.is_abandoned(id) {
                return Err(DropReason::UnknownChannel);
            }
            if self.channels.len() >= self.config.max_channels {
                return Err(DropReason::ChannelLimit);
            }
        }
        let largest = known.and_then(|channel| channel.replay.largest());
        let pn = tng_wire::pn::expand(largest, packet.packet_number).ok_or(DropReason::Replayed)?;
        if known.is_some_and(|channel| !channel.replay.is_fresh(pn)) {
            return Err(DropReason::Replayed);
        }
        let protection = self.protection.as_ref().ok_or(DropReason::NotEstablished)?;
        let key_phase = packet.flags.contains(tng_wire::Flags::KEY_PHASE);
        let (plaintext, opened) = protection
            .open(key_phase, packet_nonce(id, pn), &header.associated_data(), sealed)
            .ok_or(DropReason::AuthFailed)?;
        let mut frames = Vec::new();
        for frame in parse_frames(&plaintext) {
            let frame = frame.map_err(|error| DropReason::Wire(error.as_str()))?;
            if !frame_allowed(header.packet_type, &frame) {
                return Err(DropReason::ForbiddenFrame);
            }
            frames.push(frame);
        }

        // The packet is authentic, fresh and well formed: from here on it counts.
        let keep_previous = self.three_ptos();
        if let Some(protection) = self.protection.as_mut() {
            protection.commit(now, opened, keep_previous);
        }
        if known.is_none() {
            self.accept_peer_channel(now, id, local, remote);
        }
        self.confirm_handshake();
        self.last_activity = now;
        let ack_eliciting = header.packet_type == PacketType::Data && frames.iter().any(Frame::is_ack_eliciting);
        let Some(channel) = self.channels.get_mut(&id) else { return Ok(()) };
        let newest = channel.replay.largest().is_none_or(|largest| pn > largest);
        channel.replay.mark(pn);
        channel.received.on_packet(now, pn, ack_eliciting, ecn, packet.feedback);
        channel.last_received = now;
        if frames.iter().any(|frame| matches!(frame, Frame::Stream { data, .. } if !data.is_empty())) {
            channel.last_data_received = Some(now);
        }
        if let Some(forecaster) = channel.forecaster.as_mut() {
            let ticked = forecaster.on_arrival(now);
            channel.forecast_due |= ticked && channel.forecast_tick_end(now).is_some();
        }
        channel.counters.packets_received += 1;
        channel.counters.bytes_received += datagram_len as u64;
        if let Some(budget) = channel.budget_for((local, remote)) {
            budget.received = budget.received.saturating_add(datagram_len as u64);
        }
        if let Some(sink) = self.qlog.sink() {
            let event = QlogEvent::PacketReceived {
                channel: id,
                packet_type: header.packet_type,
                packet_number: pn,
                length: datagram_len,
                frames: &frames,
                feedback: packet.feedback,
                ecn,
            };
            sink.emit(now, &event);
        }
        if let State::Closing { .. } = self.state {
            // Whatever still arrives gets our CLOSE again, once per packet.
            channel.close_pending = true;
            return Ok(());
        }
        let moved = (local, remote) != (channel.local, channel.remote);
        let already_validating = channel.challenge.is_some_and(|c| (c.local, c.remote) == (local, remote));
        if moved && newest && !already_validating {
            // The peer's address changed (migration is keyed by connection and channel id, never by address):
            // validate the new address before moving the channel there. A PROBE counts too: a peer that knows it
            // moved challenges from its new address, and both validations then cross in one round trip.
            let budget = AmplificationBudget { received: datagram_len as u64, sent: 0 };
            let token = self.random_token();
            self.begin_validation(id, token, (local, remote), Some(budget));
        }
        for frame in &frames {
            self.handle_frame(now, id, (local, remote), frame);
            if self.is_closed() {
                break;
            }
        }
        self.pull_stream_events();
        Ok(())
    }

    /// Server: the client opened a channel (first authentic packet with a new id): validate its address.
    fn accept_peer_channel(&mut self, now: Time, id: u8, local: SocketAddr, remote: SocketAddr) {
        let mut channel = self.new_channel(now, id, local, remote, ChannelState::Validating);
        channel.unvalidated = Some(AmplificationBudget::default());
        self.channels.insert(id, Box::new(channel));
        let token = self.random_token();
        self.begin_validation(id, token, (local, remote), None);
    }

    fn handle_frame(&mut self, now: Time, id: u8, (local, remote): (SocketAddr, SocketAddr), frame: &Frame<'_>) {
        match frame {
            Frame::Padding(_) | Frame::Ping | Frame::Extension { .. } => {}
            Frame::Ack(ack) => self.on_ack_frame(now, id, ack),
            Frame::FeedbackEcho { max_queue_level, min_rate_hint } => {
                let echoed = Feedback { queue_level: *max_queue_level, rate_hint: *min_rate_hint };
                self.on_feedback_echo(now, id, echoed);
            }
            Frame::Stream { .. }
            | Frame::StreamAck { .. }
            | Frame::MaxData(_)
            | Frame::MaxStreamData { .. }
            | Frame::MaxStreams(_)
            | Frame::ResetStream { .. }
            | Frame::StopSending { .. } => {
                let Some(streams) = self.streams.as_mut() else { return };
                if let Err(error) = streams.handle_frame(now, frame) {
                    if error.is_peer_violation() {
                        self.protocol_violation(now, error.to_string());
                    }
                }
            }
            Frame::PathChallenge(token) => {
                if let Some(channel) = self.channels.get_mut(&id) {
                    if channel.responses.len() < MAX_PENDING_RESPONSES {
                        channel.responses.push(Response { token: *token, local, remote });
                    }
                }
            }
            Frame::PathResponse(token) => self.on_path_response(now, id, *token, remote),
            Frame::DeliveryForecast { tick, received, cumulative } => {
                if let Some(channel) = self.channels.get_mut(&id) {
                    let forecast =
                        DeliveryForecast { tick: *tick, received: *received, cumulative: cumulative.clone() };
                    channel.cc.on_delivery_forecast(now, &forecast);
                }
            }
            Frame::PathStatus { channel_id, status } => match status {
                PathStatus::Abandon => self.remove_channel(*channel_id),
                PathStatus::Standby | PathStatus::Available => {
                    if let Some(channel) = self.channels.get_mut(channel_id) {
                        channel.standby = *status == PathStatus::Standby;
                    }
                }
            },
            Frame::Close { error_code, reason } => {
                let reason = String::from_utf8_lossy(reason).into_owned();
                self.enter_draining(now, ConnectionError::PeerClosed { code: *error_code, reason });
            }
            Frame::NewAddress(address) => self.on_new_address(now, *address),
        }
    }

    fn on_ack_frame(&mut self, now: Time, id: u8, ack: &AckFrame) {
        let max_ack_delay = self.config.max_ack_delay;
        let rate_share = self.rate_share(id);
        let Some(channel) = self.channels.get_mut(&id) else { return };
        let Some(outcome) = channel.recovery.on_ack(now, ack, &mut channel.rtt, max_ack_delay) else {
            self.protocol_violation(now, format!("ACK of packet {} never sent on channel {id}", ack.largest));
            return;
        };
        channel.ecn_reported = ack.ecn;
        for packet in &outcome.newly_acked {
            if let Some(largest) = packet.acked_up_to {
                channel.received.forget_up_to(largest);
            }
            if let Some(protection) = self.protection.as_mut() {
                protection.on_acknowledged(packet.key_generation);
            }
        }
        if outcome.bytes_acked > 0 {
            let sample = AckSample {
                bytes_acked: outcome.bytes_acked,
                sent_time: outcome.largest_sent_time.unwrap_or(now),
                rtt: outcome.rtt_sample,
                srtt: channel.rtt.smoothed(),
                min_rtt: channel.rtt.min(),
                delivery_rate: outcome.delivery_rate,
                app_limited: outcome.app_limited,
                bytes_in_flight: channel.recovery.bytes_in_flight(),
            };
            channel.cc.set_rate_share(rate_share);
            channel.cc.on_ack(now, &sample);
        }
        if outcome.new_ce {
            channel.cc.on_ecn_ce(now, outcome.largest_sent_time.unwrap_or(now));
        }
        if let Some(streams) = self.streams.as_mut() {
            for packet in &outcome.newly_acked {
                for chunk in &packet.chunks {
                    streams.on_chunk_delivered_hint(chunk);
                }
            }
        }
        let latest_rtt = outcome.rtt_sample;
        if !outcome.lost.is_empty() {
            self.on_packets_lost(now, id, outcome.lost, outcome.persistent_congestion);
        }
        self.trace_metrics(now, id, latest_rtt);
    }

    /// The peer echoed the in-network feedback of this channel: queue level in 32 µs units, rate in kbit/s.
    fn on_feedback_echo(&mut self, now: Time, id: u8, echoed: Feedback) {
        let Some(channel) = self.channels.get_mut(&id) else { return };
        let feedback = PathFeedback {
            queue_delay: (echoed.effective_queue_level() > 0).then(|| echoed.queue_delay()),
            rate_hint: echoed.rate_hint_kbps().map(|kbps| u64::from(kbps) * 1000 / 8),
        };
        let sent_time = channel.recovery.largest_acked_sent_time().unwrap_or(now);
        channel.cc.on_feedback(now, sent_time, &feedback);
        channel.last_feedback = Some(feedback);
        if let Some(sink) = self.qlog.sink() {
            sink.emit(now, &QlogEvent::FeedbackEchoed { channel: id, feedback: echoed });
        }
    }

    fn on_path_response(&mut self, now: Time, id: u8, token: [u8; 8], remote: SocketAddr) {
        let cc_config = self.cc_config();
        let initial_rtt = self.initial_rtt();
        let Some(channel) = self.channels.get_mut(&id) else { return };
        let Some(Challenge { token: expected, local: challenged_local, remote: challenged_remote, .. }) =
            channel.challenge
        else {
            return;
        };
        // The answer must come back from the address challenged: that is what proves reachability.
        if token != expected || remote != challenged_remote {
            return;
        }
        let moved = (challenged_local, challenged_remote) != (channel.local, channel.remote);
        let revived = channel.state == ChannelState::Down;
        let mut lost = Vec::new();
        if moved || revived {
            channel.local = challenged_local;
            channel.remote = challenged_remote;
            lost = channel.restart_flow(now, &cc_config, initial_rtt);
        }
        let path = (challenged_local, challenged_remote);
        if self.qlog.is_on() {
            self.trace_migration(now, id, MigrationState::ProbingSuccessful, path);
            if moved {
                self.trace_migration(now, id, MigrationState::MigrationComplete, path);
            }
            if moved || revived {
                self.trace_lost(now, id, &lost, Some(LossTrigger::ChannelReset));
                self.trace_controller(now, id, "path_change");
            }
        }
        let Some(channel) = self.channels.get_mut(&id) else { return };
        channel.challenge = None;
        channel.probe_pending = false;
        channel.probe_at = None;
        channel.unvalidated = None;
        channel.state = ChannelState::Active;
        channel.was_up = true;
        channel.last_received = now;
        self.release_lost(lost);
        self.events.push_back(Event::ChannelUp(id));
    }

    /// Client: the server has another address: open a channel to it from each local address of that family.
    fn on_new_address(&mut self, now: Time, address: SocketAddr) {
        if self.side != Side::Client {
            return;
        }
        let mut locals: Vec<SocketAddr> = self.channels.values().map(|channel| channel.local).collect();
        locals.sort();
        locals.dedup();
        for local in locals {
            let exists = self.channels.values().any(|channel| channel.local == local && channel.remote == address);
            if local.is_ipv4() == address.is_ipv4() && !exists {
                self.open_channel(now, local, address);
            }
        }
    }

    /// Packets of channel `id` were declared lost: the controller learns it, their contents go back to their owners
    /// (stream data is then retransmitted on whatever channel the scheduler picks).
    pub(super) fn on_packets_lost(&mut self, now: Time, id: u8, lost: Vec<SentPacket>, persistent: bool) {
        self.trace_lost(now, id, &lost, None);
        let Some(channel) = self.channels.get_mut(&id) else { return };
        channel.counters.lost_packets += lost.len() as u64;
        let in_flight = lost.iter().filter(|packet| packet.ack_eliciting);
        let bytes_lost: u64 = in_flight.clone().map(|packet| packet.size).sum();
        if let Some(largest_lost_sent_time) = in_flight.map(|packet| packet.time_sent).max() {
            let event = LossEvent {
                bytes_lost,
                largest_lost_sent_time,
                persistent,
                bytes_in_flight: channel.recovery.bytes_in_flight(),
            };
            channel.cc.on_loss(now, &event);
        }
        self.release_lost(lost);
    }

    /// A probe timeout fired on channel `id`: after too many in a row the channel is down, unless the peer's packets
    /// still arrive on it (since the probe timeout before the last one): then only the ACKs are late, held up behind
    /// the data the peer queued before our packets reached it, and the path works. The window spans two probe
    /// timeouts because such a peer's data comes in bursts (a GSO batch through a token bucket arrives all at once,
    /// 50 ms apart at 5 Mbit/s), which a probe timeout measured on the empty link can fall between; a peer that
    /// falls silent is still noticed within two more probe timeouts. Otherwise a tail-loss
    /// probe: in same-path mode the newest unacknowledged stream data goes again on this channel (RFC 8985 TLP); in
    /// alternate-path mode (thesis 003) the channel's unacknowledged stream data, as much as fits the window, goes on
    /// the lowest-RTT other channel with window room, charged to that channel's controller, and this channel gets
    /// only a PING so that its own losses are still detected.
    pub(super) fn on_probe_timeout(&mut self, now: Time, id: u8) {
        let down_after = self.config.channel_down_after_ptos.max(1);
        let max_ack_delay = self.config.max_ack_delay;
        let mtu = self.max_datagram_size();
        let Some(channel) = self.channels.get_mut(&id) else { return };
        channel.counters.probe_timeouts += 1;
        if let Some(sink) = self.qlog.sink() {
            sink.emit(now, &QlogEvent::ProbeTimeout { channel: id, pto_count: channel.recovery.pto_count() });
        }
        let pto_count = channel.recovery.pto_count();
        // Until this series has two timeouts before this one, those remembered belong to an earlier series: a probe
        // timeout's base back instead.
        let series_has_both = pto_count as usize > channel.probe_timeouts_at.len();
        let heard_since =
            if series_has_both { channel.probe_timeouts_at[0] } else { now - channel.rtt.pto_base(max_ack_delay) };
        let heard_lately = channel.last_received > heard_since;
        channel.probe_timeouts_at = [channel.probe_timeouts_at[1], now];
        if pto_count >= down_after && !heard_lately {
            self.channel_down(now, id);
            return;
        }
        let alternate = match self.tail_loss {
            TailLossMode::SamePath => None,
            TailLossMode::AlternatePath => self
                .channels
                .values()
                .filter(|other| other.id != id && other.carries_data() && other.window_allows(mtu))
                .min_by_key(|other| (other.rtt.smoothed(), other.id))
                .map(|other| {
                    (other.id, (other.window(mtu).saturating_sub(other.recovery.bytes_in_flight()) / mtu).max(1))
                }),
        };
        let (carrier, packets) = match alternate {
            Some((other, room)) => (other, usize::try_from(room).unwrap_or(usize::MAX)),
            None => (id, 1),
        };
        let tail =
            self.channels.get(&id).map(|channel| channel.recovery.newest_unacked_chunks(packets)).unwrap_or_default();
        if let Some(streams) = self.streams.as_mut() {
            for chunk in &tail {
                streams.on_chunk_lost(chunk);
            }
        }
        let probes = if carrier == id { 1 } else { packets.min(tail.len()).max(1) };
        if let Some(channel) = self.channels.get_mut(&carrier) {
            channel.probes_pending += u32::try_from(probes).unwrap_or(u32::MAX);
        }
        if carrier != id {
            if let Some(channel) = self.channels.get_mut(&id) {
                channel.ping_pending = true;
            }
        }
    }
}
