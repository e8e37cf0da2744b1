//! The endpoint layer: one per host, owning every connection. It parses datagrams, routes them by connection id
//! (never by address, so connections survive address changes), answers handshakes (with stateless RETRY when
//! configured), and multiplexes the connections' transmits, timers and events.
//!
//! The cost of an event does not grow with the number of connections: the endpoint keeps, in `work`, which
//! connections may have something to send and every connection's next deadline, and updates both each time it
//! calls into a connection; connections the application borrowed are looked at again before the next poll.

mod stats;
mod work;

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;

use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use tng_wire::{Feedback, Flags, Packet, Payload, Stage};

use crate::config::{EndpointConfig, RetryPolicy};
use crate::connection::{Connection, ConnectionHandle, ConnectionStats, Datagram, EcnCodepoint, Event, Transmit};
use crate::error::{ConnectError, ConnectionError};
use crate::identity::{Identity, StaticKeypair};
use crate::qlog::SectionMetrics;
use crate::retry::TokenKey;
use crate::time::Time;

pub(crate) use stats::DropReason;
pub use stats::EndpointStats;
use work::{Marks, Work};

/// A connection and the routing keys the endpoint registered for it.
#[derive(Debug)]
struct Entry {
    connection: Connection,
    /// The id under which it is registered in `by_id`.
    id: u64,
    /// Server, while stage 3 has not arrived: the client's provisional id and address, to recognise a repeated
    /// stage 1.
    hello: Option<(u64, SocketAddr)>,
    marks: Marks,
    /// Its amplification-limited bytes already added to the endpoint's total.
    amplification_counted: u64,
}

/// A host's tng endpoint: a sans-IO state machine over all its connections.
#[derive(Debug)]
pub struct Endpoint {
    config: EndpointConfig,
    keypair: StaticKeypair,
    rng: ChaCha20Rng,
    token_key: TokenKey,
    /// Boxed: a map node has room for eleven values, so unboxed connections would leave much of it unused.
    connections: BTreeMap<ConnectionHandle, Box<Entry>>,
    by_id: BTreeMap<u64, ConnectionHandle>,
    hellos: BTreeMap<(u64, SocketAddr), ConnectionHandle>,
    stateless: VecDeque<Datagram>,
    events: VecDeque<(ConnectionHandle, Event)>,
    local_addresses: Vec<SocketAddr>,
    next_handle: u64,
    work: Work,
    stats: EndpointStats,
}

impl Endpoint {
    /// An endpoint whose every random choice (connection ids, ephemeral keys, challenges, retry secret) comes from
    /// `seed`: the same inputs replay the same bytes.
    pub fn new(config: EndpointConfig, keypair: StaticKeypair, seed: u64) -> Endpoint {
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        let mut secret = [0; 32];
        rng.fill_bytes(&mut secret);
        Endpoint {
            config,
            keypair,
            rng,
            token_key: TokenKey::new(secret),
            connections: BTreeMap::new(),
            by_id: BTreeMap::new(),
            hellos: BTreeMap::new(),
            stateless: VecDeque::new(),
            events: VecDeque::new(),
            local_addresses: Vec::new(),
            next_handle: 0,
            work: Work::default(),
            stats: EndpointStats::default(),
        }
    }

    /// This host's identity (what clients pin).
    pub fn identity(&self) -> Identity {
        self.keypair.identity()
    }

    pub fn config(&self) -> &EndpointConfig {
        &self.config
    }

    /// Starts a connection: the handshake runs on `paths[0]`; once it completes, channels open on all paths at once.
    /// With `server_pin`, the handshake fails unless the server proves that identity.
    pub fn connect(
        &mut self,
        now: Time,
        paths: &[(SocketAddr, SocketAddr)],
        server_pin: Option<Identity>,
    ) -> Result<ConnectionHandle, ConnectError> {
        let provisional_id = self.fresh_connection_id();
        let rng = self.connection_rng();
        let connection = Connection::connect(
            now,
            self.config.transport.clone(),
            &self.keypair,
            rng,
            paths,
            server_pin,
            provisional_id,
        )?;
        for &(local, _) in paths {
            if !self.local_addresses.contains(&local) {
                self.local_addresses.push(local);
            }
        }
        let handle = self.insert(connection, provisional_id, None);
        Ok(handle)
    }

    /// Feeds one received UDP datagram (`local` is the address it arrived on, `ecn` the IP header's codepoint).
    pub fn handle_datagram(
        &mut self,
        now: Time,
        local: SocketAddr,
        remote: SocketAddr,
        ecn: Option<EcnCodepoint>,
        datagram: &[u8],
    ) {
        self.stats.datagrams_received += 1;
        self.stats.bytes_received += datagram.len() as u64;
        if let Err(reason) = self.dispatch(now, (local, remote), ecn, datagram) {
            self.stats.record(reason);
        }
    }

    fn dispatch(
        &mut self,
        now: Time,
        path: (SocketAddr, SocketAddr),
        ecn: Option<EcnCodepoint>,
        datagram: &[u8],
    ) -> Result<(), DropReason> {
        let packet = Packet::parse(datagram).map_err(|error| DropReason::Wire(error.as_str()))?;
        if let Payload::Initial(handshake) = packet.payload {
            if handshake.stage == Stage::ClientHello {
                return self.handle_client_hello(now, path, &packet, handshake.token, handshake.noise, datagram.len());
            }
        }
        let handle = *self.by_id.get(&packet.connection_id).ok_or(DropReason::UnknownConnection)?;
        let entry = self.connections.get_mut(&handle).ok_or(DropReason::UnknownConnection)?;
        let connection = &mut entry.connection;
        connection.advance(now);
        let result = match packet.payload {
            Payload::Initial(handshake) => match handshake.stage {
                Stage::ServerHello => connection.handle_server_hello(now, handshake.noise),
                Stage::ClientFinish => connection.handle_client_finish(now, path, handshake.noise, datagram.len()),
                Stage::ClientHello => Err(DropReason::Unexpected),
            },
            Payload::Retry { token } => connection.handle_retry(token),
            Payload::Data(_) | Payload::Ack(_) | Payload::Probe(_) | Payload::Close(_) => {
                connection.handle_sealed(now, path, ecn, &packet, datagram.len())
            }
            // Sections end at relays; an endpoint sends and receives only end-to-end packets.
            Payload::Section(_) | Payload::SectionAck(_) => Err(DropReason::Unexpected),
        };
        self.settle(handle, true);
        result
    }

    /// A stage-1 INITIAL: a repeat of a handshake in progress, or a new handshake (maybe answered by RETRY).
    fn handle_client_hello(
        &mut self,
        now: Time,
        (local, remote): (SocketAddr, SocketAddr),
        packet: &Packet<'_>,
        token: &[u8],
        noise: &[u8],
        datagram_len: usize,
    ) -> Result<(), DropReason> {
        let server = self.config.server.clone().ok_or(DropReason::NotAServer)?;
        let provisional_id = packet.connection_id;
        if let Some(&handle) = self.hellos.get(&(provisional_id, remote)) {
            if let Some(entry) = self.connections.get_mut(&handle) {
                entry.connection.advance(now);
                entry.connection.handle_repeated_hello(datagram_len);
                self.settle(handle, true);
            }
            return Ok(());
        }
        let validated = !token.is_empty() && self.token_key.validate(now, token, remote, provisional_id);
        if !token.is_empty() && !validated {
            self.stats.invalid_tokens += 1;
        }
        let retry = match server.retry {
            RetryPolicy::Never => false,
            RetryPolicy::Always => true,
            RetryPolicy::WhenBusy { max_pending } => self.hellos.len() >= max_pending,
        };
        if retry && !validated {
            self.send_retry(now, (local, remote), provisional_id);
            return Ok(());
        }
        if self.connections.len() >= server.max_connections {
            return Err(DropReason::Refused);
        }
        let connection_id = self.fresh_connection_id();
        let rng = self.connection_rng();
        let transport = self.config.transport.clone();
        let connection = Connection::accept(
            now,
            transport,
            &self.keypair,
            rng,
            (local, remote),
            provisional_id,
            connection_id,
            noise,
            datagram_len,
            validated,
        )?;
        self.stats.handshakes_accepted += 1;
        self.insert(connection, connection_id, Some((provisional_id, remote)));
        Ok(())
    }

    /// Answers a stage-1 INITIAL with a token and keeps nothing.
    fn send_retry(&mut self, now: Time, (local, remote): (SocketAddr, SocketAddr), provisional_id: u64) {
        let token = self.token_key.issue(now, remote, provisional_id);
        let packet = Packet {
            flags: Flags::EMPTY,
            channel_id: 0,
            connection_id: provisional_id,
            packet_number: 0,
            feedback: Feedback::NEUTRAL,
            payload: Payload::Retry { token: &token },
        };
        let mut payload = Vec::with_capacity(packet.encoded_len());
        if packet.encode(&mut payload).is_ok() {
            self.stats.retries_sent += 1;
            self.stateless.push_back(Datagram { local, remote, ecn: None, payload });
        }
    }

    /// Appends the next datagram to send, if any, to `buf` (after what it holds: a batch being gathered) and says
    /// where it goes and how long it is. Connections take turns.
    pub fn poll_transmit(&mut self, now: Time, buf: &mut Vec<u8>) -> Option<Transmit> {
        if let Some(datagram) = self.stateless.pop_front() {
            let transmit = datagram.write_to(buf);
            self.count_sent(&transmit);
            return Some(transmit);
        }
        self.look_at_touched();
        // Only connections something happened to since they last had nothing to send are asked; one that sends
        // goes to the back of the queue, one that has nothing leaves it until something happens to it again.
        while let Some(handle) = self.work.next_sendable() {
            let Some(entry) = self.connections.get_mut(&handle) else { continue };
            Work::dequeued(&mut entry.marks);
            self.stats.transmit_polls += 1;
            entry.connection.advance(now);
            let transmit = entry.connection.poll_transmit(now, buf);
            self.settle(handle, transmit.is_some());
            if let Some(transmit) = transmit {
                self.count_sent(&transmit);
                return Some(transmit);
            }
        }
        None
    }

    /// [`Endpoint::poll_transmit`] into a buffer of the datagram's own.
    pub fn poll_datagram(&mut self, now: Time) -> Option<Datagram> {
        let mut buf = Vec::new();
        let transmit = self.poll_transmit(now, &mut buf)?;
        Some(Datagram::split_from(transmit, &mut buf))
    }

    fn count_sent(&mut self, transmit: &Transmit) {
        self.stats.datagrams_sent += 1;
        self.stats.bytes_sent += transmit.size as u64;
    }

    /// When [`Endpoint::handle_timeout`] next has work, if ever.
    pub fn poll_timeout(&mut self) -> Option<Time> {
        self.look_at_touched();
        self.work.next_deadline()
    }

    /// Runs every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Time) {
        self.look_at_touched();
        for handle in self.work.take_due(now) {
            let Some(entry) = self.connections.get_mut(&handle) else { continue };
            Work::fired(&mut entry.marks);
            self.stats.timers_fired += 1;
            entry.connection.advance(now);
            entry.connection.handle_timeout(now);
            self.settle(handle, true);
        }
    }

    /// The next application event of any connection.
    pub fn poll_event(&mut self) -> Option<(ConnectionHandle, Event)> {
        self.look_at_touched();
        self.events.pop_front()
    }

    /// The connection behind `handle`, while the endpoint holds it (until it has drained after closing). What the
    /// caller does to it (write, read, close, ...) shows in the next poll.
    pub fn connection(&mut self, handle: ConnectionHandle) -> Option<&mut Connection> {
        let entry = self.connections.get_mut(&handle)?;
        self.work.touch(handle, &mut entry.marks);
        Some(&mut entry.connection)
    }

    /// Caps the datagrams of the connection with `connection_id` at `size` bytes (a relay on its path wraps each in
    /// a SECTION, wire-format section 10); false if the endpoint holds no such connection (yet).
    pub fn limit_datagram_size(&mut self, connection_id: u64, size: usize) -> bool {
        let Some(entry) = self.by_id.get(&connection_id).and_then(|handle| self.connections.get_mut(handle)) else {
            return false;
        };
        entry.connection.limit_datagram_size(size);
        true
    }

    /// The channels of the connection with `connection_id` toward `remote` go through a relay's section that has
    /// room for `packets` more data packets: the section's congestion controller, not theirs, sets their window
    /// and pace until the next call (None hands them back to their own). False if there is no such connection or
    /// channel (yet).
    pub fn set_section_room(&mut self, connection_id: u64, remote: SocketAddr, packets: Option<u64>) -> bool {
        let Some(&handle) = self.by_id.get(&connection_id) else { return false };
        let Some(entry) = self.connections.get_mut(&handle) else { return false };
        let found = entry.connection.set_section_room(remote, packets);
        self.work.touch(handle, &mut entry.marks); // room that grew may let data out now
        found
    }

    /// Traces the relay section that the channels of the connection with `connection_id` toward `section.remote`
    /// go through (qlog `tng:section_updated`): what bounds them, which their own metrics do not show. Nothing
    /// happens unless connections are traced.
    pub fn trace_section(&mut self, now: Time, connection_id: u64, section: &SectionMetrics) {
        if self.config.transport.qlog.is_none() {
            return;
        }
        let Some(&handle) = self.by_id.get(&connection_id) else { return };
        if let Some(entry) = self.connections.get_mut(&handle) {
            entry.connection.advance(now);
            entry.connection.trace_section(section);
        }
    }

    /// A snapshot of a connection's counters (without needing `&mut self`).
    pub fn connection_stats(&self, handle: ConnectionHandle) -> Option<ConnectionStats> {
        self.connections.get(&handle).map(|entry| entry.connection.stats())
    }

    /// Handles of every connection held.
    pub fn connection_handles(&self) -> Vec<ConnectionHandle> {
        self.connections.keys().copied().collect()
    }

    /// A local address changed (migration): channels bound to `old` move to `new` and are validated again.
    pub fn local_address_changed(&mut self, now: Time, old: SocketAddr, new: SocketAddr) {
        for address in &mut self.local_addresses {
            if *address == old {
                *address = new;
            }
        }
        self.for_each_connection(now, |connection| connection.local_address_changed(now, old, new));
    }

    /// The peer of `handle` is now reachable at `addresses` (from the host registry): channels to addresses it no
    /// longer has are validated towards the new ones and move there once answered (simultaneous mobility).
    pub fn peer_addresses_changed(&mut self, now: Time, handle: ConnectionHandle, addresses: &[SocketAddr]) {
        if let Some(entry) = self.connections.get_mut(&handle) {
            entry.connection.advance(now);
            entry.connection.peer_addresses_changed(addresses);
            self.settle(handle, true);
        }
    }

    /// A new local address: clients open channels from it, servers advertise it.
    pub fn add_local_address(&mut self, now: Time, address: SocketAddr) {
        if !self.local_addresses.contains(&address) {
            self.local_addresses.push(address);
        }
        self.for_each_connection(now, |connection| connection.add_local_address(now, address));
    }

    /// A local address is gone: its channels are abandoned.
    pub fn remove_local_address(&mut self, now: Time, address: SocketAddr) {
        self.local_addresses.retain(|known| *known != address);
        self.for_each_connection(now, |connection| connection.remove_local_address(address));
    }

    /// Local addresses this endpoint knows of.
    pub fn local_addresses(&self) -> &[SocketAddr] {
        &self.local_addresses
    }

    pub fn stats(&self) -> EndpointStats {
        EndpointStats { connections: self.connections.len(), ..self.stats.clone() }
    }

    fn for_each_connection(&mut self, now: Time, mut apply: impl FnMut(&mut Connection)) {
        let handles: Vec<ConnectionHandle> = self.connections.keys().copied().collect();
        for handle in handles {
            if let Some(entry) = self.connections.get_mut(&handle) {
                entry.connection.advance(now);
                apply(&mut entry.connection);
                self.settle(handle, true);
            }
        }
    }

    fn insert(&mut self, connection: Connection, id: u64, hello: Option<(u64, SocketAddr)>) -> ConnectionHandle {
        let handle = ConnectionHandle(self.next_handle);
        self.next_handle += 1;
        self.by_id.insert(id, handle);
        if let Some(key) = hello {
            self.hellos.insert(key, handle);
        }
        let entry = Entry { connection, id, hello, marks: Marks::default(), amplification_counted: 0 };
        self.connections.insert(handle, Box::new(entry));
        self.settle(handle, true);
        handle
    }

    /// Settles the connections the application got hold of since the last poll.
    fn look_at_touched(&mut self) {
        for handle in self.work.take_touched() {
            if let Some(entry) = self.connections.get_mut(&handle) {
                Work::looked_at(&mut entry.marks);
                self.settle(handle, true);
            }
        }
    }

    /// After a call into a connection: brings the routing tables in line with it (its id changes once, on the
    /// client, when the server's id arrives; a server's handshake stops being pending), collects its events and
    /// counters, registers its next deadline, queues it to send if `may_send`, and drops it once drained.
    fn settle(&mut self, handle: ConnectionHandle, may_send: bool) {
        let Some(entry) = self.connections.get_mut(&handle) else { return };
        let amplification = entry.connection.amplification_limited_bytes();
        self.stats.amplification_limited_bytes += amplification.saturating_sub(entry.amplification_counted);
        entry.amplification_counted = amplification;
        while let Some(event) = entry.connection.poll_event() {
            self.events.push_back((handle, event));
        }
        let current = entry.connection.connection_id();
        if current != entry.id {
            if self.by_id.contains_key(&current) {
                // Another connection already answers to this id (a colliding or malicious server choice): this one
                // cannot be routed, so it fails rather than steal the other's packets.
                entry.connection.abort(ConnectionError::Handshake("connection id collision".into()));
            } else {
                self.by_id.remove(&entry.id);
                self.by_id.insert(current, handle);
                entry.id = current;
            }
        }
        if entry.hello.is_some() && !entry.connection.is_pending_handshake() {
            if let Some(key) = entry.hello.take() {
                self.hellos.remove(&key);
            }
        }
        if !entry.connection.is_drained() {
            self.work.set_deadline(handle, &mut entry.marks, entry.connection.poll_timeout());
            if may_send {
                self.work.queue(handle, &mut entry.marks);
            }
            return;
        }
        while let Some(event) = entry.connection.poll_event() {
            self.events.push_back((handle, event));
        }
        if let Some(mut entry) = self.connections.remove(&handle) {
            self.work.forget(handle, &mut entry.marks);
            if self.by_id.get(&entry.id) == Some(&handle) {
                self.by_id.remove(&entry.id);
            }
            if let Some(key) = entry.hello {
                self.hellos.remove(&key);
            }
        }
    }

    /// A random connection id no connection here uses.
    fn fresh_connection_id(&mut self) -> u64 {
        loop {
            let id = self.rng.next_u64();
            if !self.by_id.contains_key(&id) {
                return id;
            }
        }
    }

    /// An independent deterministic RNG for a new connection.
    fn connection_rng(&mut self) -> ChaCha20Rng {
        let mut seed = [0; 32];
        self.rng.fill_bytes(&mut seed);
        ChaCha20Rng::from_seed(seed)
    }
}
