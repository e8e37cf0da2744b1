//! The connection's paths: channels opened, validated, brought down and removed, and the local address changes the
//! endpoint reports, which move channels or add and remove them.

use std::net::SocketAddr;
use std::time::Duration;

use super::channel::{self, Channel, ChannelState};
use super::loss::{self, ControlFrame};
use super::{Connection, Event, State};
use crate::qlog::{LossTrigger, MigrationState, QlogEvent};
use crate::streams::Side;
use crate::time::Time;

impl Connection {
    /// The local address `old` became `new` (DHCP renewal, NAT rebinding seen locally, interface switch): channels
    /// bound to it move and are validated again from the new address, on a fresh flow state.
    pub(crate) fn local_address_changed(&mut self, now: Time, old: SocketAddr, new: SocketAddr) {
        for path in &mut self.planned_paths {
            if path.0 == old {
                path.0 = new;
            }
        }
        if let State::ClientHello(handshake) | State::ClientFinishDue(handshake) = &mut self.state {
            handshake.local_address_changed(old, new);
        }
        let moved: Vec<u8> = self.channels.values().filter(|c| c.local == old).map(|c| c.id).collect();
        let cc_config = self.cc_config();
        for id in moved {
            let token = self.random_token();
            if let Some(channel) = self.channels.get_mut(&id) {
                channel.local = new;
                // The new path is probably much like the old one: its RTT is the best first guess.
                let guess = channel.rtt.smoothed();
                let lost = channel.restart_flow(now, &cc_config, guess);
                let remote = channel.remote;
                self.trace_lost(now, id, &lost, Some(LossTrigger::ChannelReset));
                self.trace_controller(now, id, "path_change");
                self.release_lost(lost);
                self.begin_validation(id, token, (new, remote), None);
            }
        }
    }

    /// The peer is now reachable at `addresses`, learned outside the connection (the controller's host registry):
    /// when both ends move at once no packet from the peer's new address ever arrives to show the move. Each channel
    /// whose remote address is not among them is validated towards one of them (of its family, preferring one no
    /// other channel from the same local address uses) and moves there once the PATH_RESPONSE comes back from that
    /// address; until then it goes on where it was, and only challenges go to the new address.
    pub(crate) fn peer_addresses_changed(&mut self, addresses: &[SocketAddr]) {
        let mut ids: Vec<u8> = self.channels.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let Some(channel) = self.channels.get(&id) else { continue };
            if addresses.contains(&channel.remote) {
                continue;
            }
            let local = channel.local;
            let family: Vec<SocketAddr> =
                addresses.iter().copied().filter(|address| address.is_ipv4() == local.is_ipv4()).collect();
            let taken = |target: &SocketAddr| {
                self.channels.values().any(|other| other.id != id && other.local == local && other.remote == *target)
            };
            let Some(target) = family.iter().find(|target| !taken(target)).or(family.first()).copied() else {
                continue;
            };
            if channel.challenge.is_some_and(|c| (c.local, c.remote) == (local, target)) {
                continue;
            }
            let token = self.random_token();
            self.begin_validation(id, token, (local, target), None);
        }
    }

    /// A new local address (a radio came up): a client opens a channel from it to every remote address in use; a
    /// server advertises it (NEW_ADDRESS) so that clients open channels to it.
    pub(crate) fn add_local_address(&mut self, now: Time, address: SocketAddr) {
        if !self.is_established() {
            return;
        }
        if self.side == Side::Server {
            self.control.push_back(ControlFrame::NewAddress(address));
            return;
        }
        let mut remotes: Vec<SocketAddr> = self.channels.values().map(|c| c.remote).collect();
        remotes.sort();
        remotes.dedup();
        for remote in remotes {
            if remote.is_ipv4() != address.is_ipv4() {
                continue;
            }
            if self.channels.values().any(|c| c.local == address && c.remote == remote) {
                continue;
            }
            self.open_channel(now, address, remote);
        }
    }

    /// A local address went away: its channels are abandoned (the peer is told on the remaining ones) and their
    /// data moves to the other channels.
    pub(crate) fn remove_local_address(&mut self, address: SocketAddr) {
        let gone: Vec<u8> = self.channels.values().filter(|c| c.local == address).map(|c| c.id).collect();
        for id in gone {
            self.control.push_back(ControlFrame::PathStatus { channel_id: id, status: tng_wire::PathStatus::Abandon });
            self.remove_channel(id);
        }
        self.planned_paths.retain(|path| path.0 != address);
    }

    /// Client: opens a channel on a new path and starts validating it.
    pub(super) fn open_channel(&mut self, now: Time, local: SocketAddr, remote: SocketAddr) -> Option<u8> {
        if self.channels.len() >= self.config.max_channels {
            return None;
        }
        let id = self.next_channel_id?;
        self.next_channel_id = id.checked_add(1);
        let channel = self.new_channel(now, id, local, remote, ChannelState::Validating);
        self.channels.insert(id, Box::new(channel));
        let token = self.random_token();
        self.begin_validation(id, token, (local, remote), None);
        Some(id)
    }

    pub(super) fn new_channel(
        &self,
        now: Time,
        id: u8,
        local: SocketAddr,
        remote: SocketAddr,
        state: ChannelState,
    ) -> Channel {
        let kind = self.cc_per_channel.get(&id).copied().unwrap_or(self.cc_default);
        Channel::new(now, id, local, remote, state, kind, &self.cc_config(), self.initial_rtt())
    }

    /// RTT assumed for a new channel: what the first channel measured if it did, else the configured guess.
    pub(super) fn initial_rtt(&self) -> Duration {
        self.channels
            .values()
            .find(|channel| channel.rtt.has_sample())
            .map_or(self.config.initial_rtt, |channel| channel.rtt.smoothed().max(Duration::from_millis(1)))
    }

    /// Validates `local` -> `remote` for channel `id`: a PATH_CHALLENGE goes out at the next transmit and is
    /// repeated until answered. For the channel's own addresses (a new channel, or our own address change) the
    /// channel carries no data meanwhile; a migration target (the peer's packets came from elsewhere) is probed
    /// while the channel goes on where it was, within `budget` if the target may not be the peer's.
    pub(super) fn begin_validation(
        &mut self,
        id: u8,
        token: [u8; 8],
        (local, remote): (SocketAddr, SocketAddr),
        budget: Option<channel::AmplificationBudget>,
    ) {
        let Some(channel) = self.channels.get_mut(&id) else { return };
        channel.challenge = Some(channel::Challenge { token, local, remote, attempts: 0, budget });
        channel.probe_pending = true;
        channel.probe_at = None;
        let own = (local, remote) == (channel.local, channel.remote);
        if own && channel.state == ChannelState::Active {
            channel.state = ChannelState::Validating;
        }
        if let Some(sink) = self.qlog.sink() {
            if own {
                let state = channel.state;
                sink.emit(self.now, &QlogEvent::ChannelUpdated { channel: id, local, remote, state });
            }
            let state = MigrationState::ProbingStarted;
            sink.emit(self.now, &QlogEvent::MigrationStateUpdated { channel: id, state, local, remote });
        }
    }

    /// A channel lost liveness: everything in flight on it is handed back for retransmission elsewhere.
    pub(super) fn channel_down(&mut self, now: Time, id: u8) {
        let reprobe = self.config.reprobe_interval;
        let Some(channel) = self.channels.get_mut(&id) else { return };
        if channel.state == ChannelState::Down {
            return;
        }
        let was_up = channel.was_up;
        channel.state = ChannelState::Down;
        channel.challenge = None;
        channel.probe_pending = false;
        channel.probe_at = Some(now + reprobe);
        let lost = channel.recovery.drain_all();
        channel.counters.lost_packets += lost.len() as u64;
        self.trace_lost(now, id, &lost, Some(LossTrigger::ChannelReset));
        self.release_lost(lost);
        if was_up {
            self.events.push_back(Event::ChannelDown(id));
        }
    }

    pub(super) fn remove_channel(&mut self, id: u8) {
        let Some(mut channel) = self.channels.remove(&id) else { return };
        let lost = channel.recovery.drain_all();
        self.trace_lost(self.now, id, &lost, Some(LossTrigger::ChannelReset));
        self.release_lost(lost);
        if self.side == Side::Server {
            self.mark_abandoned(id);
        }
        if channel.state == ChannelState::Active || channel.was_up {
            self.events.push_back(Event::ChannelDown(id));
        }
    }

    fn mark_abandoned(&mut self, id: u8) {
        if let Some(word) = self.abandoned.get_mut(usize::from(id / 64)) {
            *word |= 1 << (id % 64);
        }
    }

    pub(super) fn is_abandoned(&self, id: u8) -> bool {
        self.abandoned.get(usize::from(id / 64)).is_some_and(|word| word & (1 << (id % 64)) != 0)
    }

    /// Hands the stream chunks and control frames of lost packets back to their owners.
    pub(super) fn release_lost(&mut self, lost: Vec<loss::SentPacket>) {
        for packet in lost {
            if let Some(streams) = self.streams.as_mut() {
                for chunk in &packet.chunks {
                    streams.on_chunk_lost(chunk);
                }
            }
            for frame in packet.control {
                let still_relevant = match &frame {
                    ControlFrame::PathStatus { channel_id, status } => {
                        *status == tng_wire::PathStatus::Abandon || self.channels.contains_key(channel_id)
                    }
                    ControlFrame::NewAddress(_) => true,
                };
                if still_relevant {
                    self.control.push_back(frame);
                }
            }
        }
    }
}
