//! Assembling packets, in priority order: handshake datagrams, CLOSE, then per channel PROBE packets (challenges
//! and responses), tail-loss probes, PINGs and due ACKs, and finally new data on the channel the scheduler picks.
//!
//! Probes and ACKs ignore the congestion window and the pacer (they are small and keep loss recovery and
//! validation moving); data respects both, and the connection's rate cap.

use std::net::SocketAddr;

use tng_wire::{pn, Flags, FlowHeader, Frame, PacketType, HEADER_LEN, TAG_LEN};

use super::channel::{Channel, ChannelState};
use super::crypto::{packet_nonce, MAX_PACKET_NUMBER};
use super::loss::{ControlFrame, Outgoing};
use super::received::EcnCodepoint;
use super::{Connection, State, Transmit};
use crate::error::ConnectionError;
use crate::qlog::QlogEvent;
use crate::scheduler::ChannelView;
use crate::streams::SentChunk;
use crate::time::Time;

/// What a tracked (ack-eliciting or ACK-carrying) packet holds, for loss recovery.
struct Contents {
    chunks: Vec<SentChunk>,
    control: Vec<ControlFrame>,
    /// The packet carries retransmitted stream data.
    retransmission: bool,
    app_limited: bool,
}

/// Why a DATA packet is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Purpose {
    /// New or retransmitted data on the scheduler's channel; nothing to send means no packet.
    Data,
    /// A tail-loss probe: data to repeat if there is any, else a PING.
    Probe,
    /// Only a PING (keepalive, or the timed-out channel's companion of an alternate-path probe).
    Ping,
}

/// Whether a sent packet enters loss recovery.
enum Tracking {
    /// PROBE and CLOSE packets: repeated by their own timers, never acknowledged for their own sake.
    Untracked,
    /// An ACK packet: tracked (its ACK frame being received lets us forget old ranges) but not in flight.
    AckOnly,
    Data(Contents),
}

/// A packet under construction at the end of the caller's buffer: room for the header, then the plaintext frames,
/// sealed in place. The state behind its ACK, FEEDBACK_ECHO and DELIVERY_FORECAST prefix is consumed only if the
/// packet really leaves; one that does not takes its bytes back out of the buffer.
struct Plaintext<'a> {
    packet: &'a mut Vec<u8>,
    /// Where this packet starts in the buffer (the datagrams before it are the caller's).
    start: usize,
    sealed: bool,
    with_ack: bool,
    with_echo: bool,
    with_forecast: bool,
}

impl<'a> Plaintext<'a> {
    /// An empty plaintext at the end of `buf`, with room for `frames` bytes of frames and the tag.
    fn with_room(buf: &'a mut Vec<u8>, frames: usize) -> Plaintext<'a> {
        let start = buf.len();
        buf.reserve(HEADER_LEN + frames + TAG_LEN);
        buf.resize(start + HEADER_LEN, 0);
        Plaintext { packet: buf, start, sealed: false, with_ack: false, with_echo: false, with_forecast: false }
    }

    /// Bytes of frames so far.
    fn len(&self) -> usize {
        self.packet.len() - self.start - HEADER_LEN
    }

    fn frames(&self) -> &[u8] {
        &self.packet[self.start + HEADER_LEN..]
    }
}

impl Drop for Plaintext<'_> {
    fn drop(&mut self) {
        if !self.sealed {
            self.packet.truncate(self.start);
        }
    }
}

impl Connection {
    /// The next datagram to send, if any.
    pub(crate) fn poll_transmit(&mut self, now: Time, out: &mut Vec<u8>) -> Option<Transmit> {
        if let Some(transmit) = self.poll_handshake_transmit(now, out) {
            if let Some(sink) = self.qlog.sink() {
                let length = transmit.size;
                let event = QlogEvent::PacketSent {
                    channel: 0,
                    packet_type: PacketType::Initial,
                    packet_number: 0,
                    length,
                    frames: &[],
                };
                sink.emit(now, &event);
            }
            return Some(transmit);
        }
        match self.state {
            State::Established => {}
            State::Closing { .. } => return self.poll_close(now, out),
            _ => return None,
        }
        let interval = self.config.key_update_interval_packets;
        if let Some(protection) = self.protection.as_mut() {
            protection.maybe_initiate_update(interval);
        }
        // Round robin from the cursor, without collecting the ids: this runs for every datagram.
        let mut next = self.cursor;
        for _ in 0..self.channels.len() {
            let id = match self.channels.range(next..).next().or_else(|| self.channels.iter().next()) {
                Some((&id, _)) => id,
                None => break,
            };
            if let Some(transmit) = self.poll_channel_control(now, id, out) {
                self.cursor = id.wrapping_add(1);
                return Some(transmit);
            }
            next = id.wrapping_add(1);
        }
        self.poll_data(now, out)
    }

    /// When a pacer (a channel's, or the rate cap) next lets data out, if data waits only for that: later than
    /// `self.now`, so that a caller never spins on a deadline that has passed. A channel whose pacer has released
    /// already and still did not send was passed over for one that delivers sooner once its pacer releases.
    pub(super) fn pacing_deadline(&self) -> Option<Time> {
        if !self.has_data_to_send(self.now) {
            return None;
        }
        let mtu = self.max_datagram_size();
        let channel_release = self
            .channels
            .values()
            .filter(|channel| channel.carries_data() && channel.window_allows(mtu))
            .map(|channel| channel.pacer.next_release(mtu, channel.pacing_rate(mtu)))
            .filter(|release| *release > self.now)
            .min()?;
        let release = match &self.rate_cap {
            Some((rate, pacer)) => channel_release.max(pacer.next_release(mtu, *rate)),
            None => channel_release,
        };
        (release > self.now).then_some(release)
    }

    /// The sender ran out of data: the data channels whose window has room are app-limited.
    fn note_out_of_data(&mut self) {
        let mtu = self.max_datagram_size();
        for channel in self.channels.values_mut().filter(|channel| channel.carries_data()) {
            if channel.window_allows(mtu) {
                channel.recovery.on_out_of_data();
            }
        }
    }

    fn has_data_to_send(&self, now: Time) -> bool {
        !self.control.is_empty() || self.streams.as_ref().is_some_and(|streams| streams.has_pending_frames(now))
    }

    /// CLOSE packets owed while closing.
    fn poll_close(&mut self, now: Time, out: &mut Vec<u8>) -> Option<Transmit> {
        let id = self.channels.values().find(|channel| channel.close_pending).map(|channel| channel.id)?;
        let (code, reason) = self.close_frame.clone().unwrap_or_default();
        let room = self.max_plaintext().saturating_sub(16);
        let reason = reason.as_bytes();
        let reason = &reason[..reason.len().min(room)];
        let plaintext = Plaintext::with_room(out, room + 16);
        Frame::Close { error_code: code, reason }.encode(plaintext.packet);
        if let Some(channel) = self.channels.get_mut(&id) {
            channel.close_pending = false;
        }
        let (local, remote) = self.channels.get(&id).map(|channel| (channel.local, channel.remote))?;
        self.seal(now, id, PacketType::Close, plaintext, Tracking::Untracked, (local, remote))
    }

    /// PROBE packets, tail-loss probes, PINGs and due ACKs of one channel.
    fn poll_channel_control(&mut self, now: Time, id: u8, out: &mut Vec<u8>) -> Option<Transmit> {
        if let Some(transmit) = self.poll_probe_packet(now, id, out) {
            return Some(transmit);
        }
        let channel = self.channels.get(&id)?;
        let active = channel.state == ChannelState::Active;
        if active && channel.probes_pending > 0 {
            if let Some(channel) = self.channels.get_mut(&id) {
                channel.probes_pending -= 1;
                channel.counters.tail_loss_probes += 1;
            }
            return self.send_data(now, id, Purpose::Probe, out);
        }
        if active && channel.ping_pending {
            if let Some(channel) = self.channels.get_mut(&id) {
                channel.ping_pending = false;
            }
            return self.send_data(now, id, Purpose::Ping, out);
        }
        let ack_due = channel.received.ack_deadline(self.config.max_ack_delay).is_some_and(|due| due <= now);
        if ack_due || channel.forecast_due {
            let plaintext = self.plaintext_with_prefix(now, id, out);
            let path = (channel.local, channel.remote);
            let transmit = self.seal(now, id, PacketType::Ack, plaintext, Tracking::AckOnly, path);
            if transmit.is_none() {
                // Held back by the amplification limit: give up this ACK rather than retry it in a loop; the
                // next packet from the peer asks again.
                if let Some(channel) = self.channels.get_mut(&id) {
                    channel.received.on_ack_sent();
                    channel.forecast_due = false;
                }
            }
            return transmit;
        }
        None
    }

    /// A PROBE packet: owed PATH_RESPONSEs and a due PATH_CHALLENGE that go to the same addresses.
    fn poll_probe_packet(&mut self, now: Time, id: u8, out: &mut Vec<u8>) -> Option<Transmit> {
        let channel = self.channels.get(&id)?;
        let challenge = channel.challenge.filter(|_| channel.probe_pending);
        let path = match (channel.responses.first(), challenge) {
            (Some(response), _) => (response.local, response.remote),
            (None, Some(challenge)) => (challenge.local, challenge.remote),
            (None, None) => return None,
        };
        let plaintext = Plaintext::with_room(out, self.max_plaintext());
        for response in channel.responses.iter().filter(|response| (response.local, response.remote) == path) {
            Frame::PathResponse(response.token).encode(plaintext.packet);
        }
        let with_challenge = challenge.filter(|challenge| (challenge.local, challenge.remote) == path);
        if let Some(challenge) = with_challenge {
            Frame::PathChallenge(challenge.token).encode(plaintext.packet);
        }
        let transmit = self.seal(now, id, PacketType::Probe, plaintext, Tracking::Untracked, path);
        let reprobe = self.config.reprobe_interval;
        let channel = self.channels.get_mut(&id)?;
        if transmit.is_some() || channel.budget_for(path).is_some() {
            // Sent, or held back by the amplification limit: either way the responses are settled (the peer
            // repeats its challenge) and the challenge waits for its timer.
            channel.responses.retain(|response| (response.local, response.remote) != path);
            if let (Some(_), Some(challenge)) = (with_challenge, channel.challenge.as_mut()) {
                challenge.attempts += 1;
                let attempts = challenge.attempts;
                channel.probe_pending = false;
                let wait =
                    if channel.state == ChannelState::Down { reprobe } else { channel.challenge_interval(attempts) };
                channel.probe_at = Some(now + wait);
            }
        }
        transmit
    }

    /// New data on the channel the scheduler picks; it sees every channel (validation, window, pacer, standby)
    /// and the rate cap gates them all.
    fn poll_data(&mut self, now: Time, out: &mut Vec<u8>) -> Option<Transmit> {
        if !self.has_data_to_send(now) {
            self.note_out_of_data();
            return None;
        }
        let mtu = self.max_datagram_size();
        if let Some((rate, pacer)) = self.rate_cap.as_mut() {
            if pacer.delay(now, mtu, *rate, mtu).is_some() {
                return None;
            }
        }
        let mut views = std::mem::take(&mut self.channel_views);
        views.clear();
        views.extend(
            self.channels
                .values()
                .map(|channel| channel_view(channel, mtu, self.weights.get(&channel.id).copied().unwrap_or(1))),
        );
        let picked = self.scheduler.pick(now, &views, mtu);
        self.channel_views = views;
        let id = picked?;
        let channel = self.channels.get_mut(&id)?;
        let rate = channel.pacing_rate(mtu);
        if channel.state != ChannelState::Active || channel.pacer.delay(now, mtu, rate, mtu).is_some() {
            return None;
        }
        self.send_data(now, id, Purpose::Data, out)
    }

    /// A DATA packet on channel `id` with a piggybacked ACK: control frames and stream data, or just a PING.
    fn send_data(&mut self, now: Time, id: u8, purpose: Purpose, out: &mut Vec<u8>) -> Option<Transmit> {
        let max_plaintext = self.max_plaintext();
        let channel = self.channels.get(&id)?;
        let path = (channel.local, channel.remote);
        // The prefix goes first, where the receiver looks for it; the body's frames follow in the same buffer.
        let plaintext = self.plaintext_with_prefix(now, id, out);
        let prefix_len = plaintext.len();
        let body_len = |plaintext: &Plaintext| plaintext.len() - prefix_len;
        let mut control = Vec::new();
        let budget = if purpose == Purpose::Ping { 0 } else { max_plaintext.saturating_sub(prefix_len) };
        while let Some(frame) = self.control.front() {
            let encoded = control_frame(frame);
            if body_len(&plaintext) + encoded.encoded_len() > budget {
                break;
            }
            encoded.encode(plaintext.packet);
            if let Some(frame) = self.control.pop_front() {
                control.push(frame);
            }
        }
        let mut chunks = Vec::new();
        let mut retransmission = false;
        if let Some(streams) = self.streams.as_mut().filter(|_| purpose != Purpose::Ping) {
            let retransmitted_before = streams.bytes_retransmitted();
            let room = budget.saturating_sub(body_len(&plaintext));
            streams.write_frames(now, room, plaintext.packet, &mut chunks);
            retransmission = streams.bytes_retransmitted() > retransmitted_before;
        }
        if body_len(&plaintext) == 0 {
            if purpose == Purpose::Data {
                // The queued streams had nothing they may send (flow control).
                self.note_out_of_data();
                return None;
            }
            Frame::Ping.encode(plaintext.packet);
            // Nothing left to repeat: one PING elicits the ACK, further probes would only repeat it.
            if let Some(channel) = self.channels.get_mut(&id) {
                channel.probes_pending = 0;
            }
        }
        let app_limited = plaintext.len() < max_plaintext / 2;
        let contents = Contents { chunks, control, retransmission, app_limited };
        self.seal(now, id, PacketType::Data, plaintext, Tracking::Data(contents), path)
    }

    /// A plaintext that starts with the ACK, FEEDBACK_ECHO and DELIVERY_FORECAST the channel owes (not yet marked
    /// as sent), with room for a full packet.
    fn plaintext_with_prefix<'a>(&self, now: Time, id: u8, out: &'a mut Vec<u8>) -> Plaintext<'a> {
        let mut plaintext = Plaintext::with_room(out, self.max_plaintext());
        if let Some(channel) = self.channels.get(&id) {
            if let Some(ack) = channel.received.ack_frame(now).filter(|_| channel.received.awaits_ack()) {
                Frame::Ack(ack).encode(plaintext.packet);
                plaintext.with_ack = true;
            }
            if let Some(feedback) = channel.received.feedback().peek() {
                Frame::FeedbackEcho { max_queue_level: feedback.queue_level, min_rate_hint: feedback.rate_hint }
                    .encode(plaintext.packet);
                plaintext.with_echo = true;
            }
            if let Some(forecast) = due_forecast(channel) {
                forecast.encode(plaintext.packet);
                plaintext.with_forecast = true;
            }
        }
        plaintext
    }

    /// Seals `plaintext` as a `packet_type` packet of channel `id` to `path` and does the sender's bookkeeping;
    /// the ACK and echo state it carries count as sent only if it leaves.
    fn seal(
        &mut self,
        now: Time,
        id: u8,
        packet_type: PacketType,
        mut plaintext: Plaintext<'_>,
        tracking: Tracking,
        (local, remote): (SocketAddr, SocketAddr),
    ) -> Option<Transmit> {
        let ecn = self.config.ecn;
        let connection_id = self.connection_id;
        let mtu = self.max_datagram_size();
        let size = (plaintext.len() + HEADER_LEN + TAG_LEN) as u64;
        let channel = self.channels.get_mut(&id)?;
        if channel.budget_for((local, remote)).is_some_and(|budget| !budget.allows(size)) {
            self.amplification_limited_bytes += size;
            return None;
        }
        let packet_number = channel.recovery.next_packet_number();
        if packet_number > MAX_PACKET_NUMBER {
            self.fail(ConnectionError::PacketNumbersExhausted(id));
            return None;
        }
        let protection = self.protection.as_mut()?;
        let key_generation = protection.send_generation();
        let flags = Flags::EMPTY
            .with(Flags::ECN_CAPABLE, ecn)
            .with(Flags::FEEDBACK_ECHO, plaintext.with_echo)
            .with(Flags::KEY_PHASE, protection.key_phase());
        let header = FlowHeader {
            packet_type,
            flags,
            channel_id: id,
            connection_id,
            packet_number: pn::truncate(packet_number),
            payload_length: u16::try_from(plaintext.len() + TAG_LEN).ok()?,
            feedback: tng_wire::Feedback::NEUTRAL,
        };
        // The trace reads the frames, which sealing turns into ciphertext.
        let traced_frames = self.qlog.is_on().then(|| plaintext.frames().to_vec());
        let start = plaintext.start;
        plaintext.packet[start..start + HEADER_LEN].copy_from_slice(&header.encode());
        let nonce = packet_nonce(id, packet_number);
        if !protection.seal(nonce, &header.associated_data(), plaintext.packet, start + HEADER_LEN) {
            return None;
        }
        plaintext.sealed = true;
        let datagram_len = plaintext.packet.len() - start;
        let acked_up_to = if plaintext.with_ack { channel.received.largest_acknowledged() } else { None };
        if plaintext.with_ack {
            channel.received.on_ack_sent();
        }
        if plaintext.with_echo {
            channel.received.feedback_mut().take();
        }
        if plaintext.with_forecast {
            channel.forecast_due = false;
        }
        match tracking {
            Tracking::Untracked => {
                channel.recovery.skip_untracked();
            }
            Tracking::AckOnly => {
                let outgoing = Outgoing {
                    size,
                    ack_eliciting: false,
                    chunks: Vec::new(),
                    control: Vec::new(),
                    acked_up_to,
                    app_limited: true,
                    key_generation,
                };
                channel.recovery.on_sent(now, outgoing);
            }
            Tracking::Data(contents) => {
                if contents.retransmission {
                    channel.counters.retransmitted_packets += 1;
                }
                let outgoing = Outgoing {
                    size,
                    ack_eliciting: true,
                    chunks: contents.chunks,
                    control: contents.control,
                    acked_up_to,
                    app_limited: contents.app_limited,
                    key_generation,
                };
                channel.recovery.on_sent(now, outgoing);
                channel.cc.on_sent(now, size, channel.recovery.bytes_in_flight());
                if let Some(room) = channel.section_room.as_mut() {
                    *room = room.saturating_sub(1);
                }
                if !channel.window_allows(mtu) {
                    channel.recovery.on_window_full();
                }
                channel.last_sent_eliciting = now;
                channel.pacer.on_sent(size);
                if let Some((_, pacer)) = self.rate_cap.as_mut() {
                    pacer.on_sent(size);
                }
            }
        }
        channel.counters.sent_packets += 1;
        channel.counters.bytes_sent += size;
        if let Some(budget) = channel.budget_for((local, remote)) {
            budget.sent += size;
        }
        if let Some(frames) = traced_frames {
            self.trace_sent(now, (id, packet_type, packet_number), datagram_len, &frames);
        }
        Some(Transmit { local, remote, ecn: ecn.then_some(EcnCodepoint::Ect0), size: datagram_len })
    }

    fn max_plaintext(&self) -> usize {
        (self.max_datagram_size() as usize).saturating_sub(HEADER_LEN + TAG_LEN)
    }
}

/// The DELIVERY_FORECAST the channel owes, if a tick ended since the last one left.
fn due_forecast(channel: &Channel) -> Option<Frame<'static>> {
    let forecast = channel.forecaster.as_ref().filter(|_| channel.forecast_due)?.forecast();
    Some(Frame::DeliveryForecast { tick: forecast.tick, received: forecast.received, cumulative: forecast.cumulative })
}

fn control_frame(frame: &ControlFrame) -> Frame<'static> {
    match frame {
        ControlFrame::PathStatus { channel_id, status } => {
            Frame::PathStatus { channel_id: *channel_id, status: *status }
        }
        ControlFrame::NewAddress(address) => Frame::NewAddress(*address),
    }
}

fn channel_view(channel: &Channel, mtu: u64, weight: u32) -> ChannelView {
    ChannelView {
        channel: channel.id,
        srtt: channel.rtt.smoothed(),
        cwnd: channel.window(mtu),
        bytes_in_flight: channel.recovery.bytes_in_flight(),
        can_send_at: channel.pacer.next_release(mtu, channel.pacing_rate(mtu)),
        validated: channel.state == ChannelState::Active,
        weight,
        standby: channel.standby,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packet_that_does_not_leave_takes_its_bytes_back_out_of_the_buffer() {
        let mut ping = Vec::new();
        Frame::Ping.encode(&mut ping);
        let mut buf = b"an earlier datagram".to_vec();
        {
            let plaintext = Plaintext::with_room(&mut buf, 64);
            Frame::Ping.encode(plaintext.packet);
            assert_eq!(plaintext.frames(), &ping[..], "a PING after the header's room");
        }
        assert_eq!(buf, b"an earlier datagram");
    }
}
