//! A tiny network for integration tests on virtual time: one client endpoint with one address per path, one server
//! endpoint, per-path delay, loss and reordering, and helpers that play the application (write streams, read them
//! back). Everything is deterministic: the same seed gives the same run.

// Each test binary uses a different part of the harness.
#![allow(dead_code)]

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BinaryHeap};
use std::net::SocketAddr;
use std::time::Duration;

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use tng_proto::{
    ConnectionHandle, EcnCodepoint, Endpoint, EndpointConfig, Event, ReadOutcome, StaticKeypair, StreamId, Time,
};

pub mod operations;

pub const SERVER: &str = "10.0.0.1:4477";

pub fn addr(text: &str) -> SocketAddr {
    text.parse().expect("test address")
}

/// The client address of path `index`.
pub fn client_addr(index: usize) -> SocketAddr {
    SocketAddr::from(([10, 1, index as u8, 2], 5000))
}

/// How one path treats datagrams, in both directions.
#[derive(Clone, Debug)]
pub struct PathConfig {
    pub delay: Duration,
    /// Probability that a datagram is dropped.
    pub loss: f64,
    /// Extra delay drawn uniformly up to this, so datagrams overtake each other.
    pub jitter: Duration,
    /// Drop everything (a dead radio).
    pub down: bool,
    /// Bottleneck rate in bytes per second (each direction serialises its datagrams); `None` is unlimited.
    pub rate: Option<u64>,
    /// Longest a datagram may wait for the bottleneck; one that would wait longer is dropped (a drop-tail queue of
    /// that many seconds of the rate). `None` queues without limit.
    pub queue: Option<Duration>,
    /// What the bottleneck lets through at once after it was idle, in seconds of its rate (a token bucket's burst,
    /// as `tc tbf burst`); zero serialises every datagram.
    pub burst: Duration,
}

impl PathConfig {
    /// A path with one-way delay `delay_ms` and a 10 MB/s bottleneck, no loss.
    pub fn clean(delay_ms: u64) -> PathConfig {
        PathConfig {
            delay: Duration::from_millis(delay_ms),
            loss: 0.0,
            jitter: Duration::ZERO,
            down: false,
            rate: Some(10_000_000),
            queue: None,
            burst: Duration::ZERO,
        }
    }

    /// A path with loss and jitter on top of [`PathConfig::clean`].
    pub fn lossy(delay_ms: u64, loss: f64, jitter_ms: u64) -> PathConfig {
        PathConfig { loss, jitter: Duration::from_millis(jitter_ms), ..PathConfig::clean(delay_ms) }
    }
}

/// Decides whether the network delivers a datagram.
pub type Filter = Box<dyn FnMut(&Datagram) -> bool>;
/// Rewrites a datagram in flight (an in-path switch).
pub type Switch = Box<dyn FnMut(&mut Datagram)>;

/// A datagram in flight.
#[derive(Clone, Debug)]
pub struct Datagram {
    pub to_server: bool,
    pub from: SocketAddr,
    pub to: SocketAddr,
    pub ecn: Option<EcnCodepoint>,
    pub payload: Vec<u8>,
}

#[derive(Clone, Debug)]
struct InFlight {
    deliver_at: Time,
    /// Tie-breaker keeping delivery order deterministic.
    sequence: u64,
    datagram: Datagram,
}

/// Datagrams in flight are delivered in (time, sequence) order: that is their order in the network's heap.
impl Ord for InFlight {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.deliver_at, self.sequence).cmp(&(other.deliver_at, other.sequence))
    }
}

impl PartialOrd for InFlight {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for InFlight {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for InFlight {}

/// What the application saw on one stream.
#[derive(Clone, Debug, Default)]
pub struct Received {
    pub data: Vec<u8>,
    pub finished: bool,
}

/// Data an application still wants to write on a stream.
#[derive(Clone, Debug)]
struct PendingWrite {
    client_side: bool,
    handle: ConnectionHandle,
    stream: StreamId,
    data: Vec<u8>,
    written: usize,
    finish: bool,
}

pub struct Pair {
    pub now: Time,
    pub client: Endpoint,
    pub server: Endpoint,
    pub server_addr: SocketAddr,
    /// Path `i` is the client's address `client_addrs[i]`.
    pub client_addrs: Vec<SocketAddr>,
    pub paths: Vec<PathConfig>,
    /// The earliest delivery on top.
    in_flight: BinaryHeap<Reverse<InFlight>>,
    sequence: u64,
    /// When each path's bottleneck is free again, per direction (index 0 towards the server).
    /// When each (path, direction) bottleneck is done with what it holds, in nanoseconds (before time zero while
    /// it has saved a burst).
    busy_until: BTreeMap<(usize, bool), i128>,
    rng: ChaCha20Rng,
    pub client_events: Vec<(ConnectionHandle, Event)>,
    pub server_events: Vec<(ConnectionHandle, Event)>,
    /// Streams read by the application, per side and connection.
    pub client_received: BTreeMap<(ConnectionHandle, StreamId), Received>,
    pub server_received: BTreeMap<(ConnectionHandle, StreamId), Received>,
    writes: Vec<PendingWrite>,
    /// What the application reads streams into.
    read_buffer: Vec<u8>,
    /// Every datagram delivered and accepted by its receiver, when capturing.
    pub capture: bool,
    pub captured: Vec<Datagram>,
    /// Decides per datagram whether the network drops it (after the path's own rules).
    pub filter: Option<Filter>,
    /// Plays an in-path switch: may rewrite a datagram's feedback fields or ECN codepoint.
    pub switch: Option<Switch>,
    /// More addresses the server receives on (besides `server_addr`).
    pub extra_server_addrs: Vec<SocketAddr>,
    pub client_keypair: StaticKeypair,
    pub server_keypair: StaticKeypair,
    /// Delivered datagrams that arrived at an address nobody holds any more.
    pub undeliverable: u64,
    /// The network drops this many of the next datagrams.
    pub drop_next: u32,
    /// The network delivers this many of the next datagrams twice.
    pub duplicate_next: u32,
    /// The network changes one byte (at random) of each of this many of the next datagrams.
    pub mutate_next: u32,
}

impl Pair {
    pub fn new(
        client_config: EndpointConfig,
        server_config: EndpointConfig,
        paths: Vec<PathConfig>,
        seed: u64,
    ) -> Pair {
        let client_keypair = StaticKeypair::from_seed(seed.wrapping_mul(2).wrapping_add(1));
        let server_keypair = StaticKeypair::from_seed(seed.wrapping_mul(2).wrapping_add(2));
        let client_addrs = (0..paths.len()).map(client_addr).collect();
        Pair {
            now: Time::ZERO,
            client: Endpoint::new(client_config, client_keypair.clone(), seed ^ 0xc1),
            server: Endpoint::new(server_config, server_keypair.clone(), seed ^ 0x5e),
            server_addr: addr(SERVER),
            client_addrs,
            paths,
            in_flight: BinaryHeap::new(),
            sequence: 0,
            busy_until: BTreeMap::new(),
            rng: ChaCha20Rng::seed_from_u64(seed),
            client_events: Vec::new(),
            server_events: Vec::new(),
            client_received: BTreeMap::new(),
            server_received: BTreeMap::new(),
            writes: Vec::new(),
            read_buffer: vec![0; 64 * 1024],
            capture: false,
            captured: Vec::new(),
            filter: None,
            switch: None,
            extra_server_addrs: Vec::new(),
            client_keypair,
            server_keypair,
            undeliverable: 0,
            drop_next: 0,
            duplicate_next: 0,
            mutate_next: 0,
        }
    }

    /// A client and a server with default configurations.
    pub fn default_with_paths(paths: Vec<PathConfig>, seed: u64) -> Pair {
        Pair::new(EndpointConfig::client(), EndpointConfig::server(), paths, seed)
    }

    /// The (local, remote) pairs of every path, for `connect`.
    pub fn path_list(&self) -> Vec<(SocketAddr, SocketAddr)> {
        self.client_addrs.iter().map(|&local| (local, self.server_addr)).collect()
    }

    pub fn connect(&mut self) -> ConnectionHandle {
        let paths = self.path_list();
        self.client.connect(self.now, &paths, None).expect("connect")
    }

    /// Connects and drives until both sides are connected; returns the client's and the server's handles.
    pub fn connect_and_wait(&mut self) -> (ConnectionHandle, ConnectionHandle) {
        let client = self.connect();
        let connected = self.run_until(Duration::from_secs(10), |pair| {
            pair.server_events.iter().any(|(_, event)| matches!(event, Event::Connected { .. }))
        });
        assert!(connected, "handshake did not complete: {:?} / {:?}", self.client_events, self.server_events);
        let server = self
            .server_events
            .iter()
            .find(|(_, event)| matches!(event, Event::Connected { .. }))
            .map(|(handle, _)| *handle)
            .expect("server connection");
        (client, server)
    }

    fn path_of(&self, datagram: &Datagram) -> Option<usize> {
        let client_side = if datagram.to_server { datagram.from } else { datagram.to };
        self.client_addrs.iter().position(|&address| address == client_side)
    }

    /// Puts a datagram on the network (subject to the path's loss, delay and jitter).
    pub fn send(&mut self, mut datagram: Datagram) {
        let Some(index) = self.path_of(&datagram) else {
            self.undeliverable += 1;
            return;
        };
        let Some(path) = self.paths.get(index).cloned() else { return };
        if path.down || (path.loss > 0.0 && unit(&mut self.rng) < path.loss) {
            return;
        }
        if let Some(filter) = self.filter.as_mut() {
            if !filter(&datagram) {
                return;
            }
        }
        if self.drop_next > 0 {
            self.drop_next -= 1;
            return;
        }
        if let Some(switch) = self.switch.as_mut() {
            switch(&mut datagram);
        }
        if self.mutate_next > 0 && !datagram.payload.is_empty() {
            self.mutate_next -= 1;
            let at = self.rng.next_u64() as usize % datagram.payload.len();
            datagram.payload[at] ^= 1 + (self.rng.next_u64() % 255) as u8;
        }
        let copies = if self.duplicate_next > 0 {
            self.duplicate_next -= 1;
            2
        } else {
            1
        };
        let jitter = if path.jitter.is_zero() {
            Duration::ZERO
        } else {
            Duration::from_nanos(self.rng.next_u64() % (path.jitter.as_nanos() as u64).max(1))
        };
        let mut departure = self.now;
        if let Some(rate) = path.rate {
            // Tokens saved while idle (a full bucket at first), up to the burst, let datagrams leave as if the link
            // had started earlier.
            let now = i128::from(self.now.as_nanos());
            let idle_since = now - path.burst.as_nanos() as i128;
            let busy = self.busy_until.entry((index, datagram.to_server)).or_insert(idle_since);
            let start = (*busy).max(idle_since);
            if path.queue.is_some_and(|queue| start - now > queue.as_nanos() as i128) {
                return;
            }
            *busy = start + i128::from(datagram.payload.len() as u64) * 1_000_000_000 / i128::from(rate.max(1));
            departure = Time::from_nanos(u64::try_from((*busy).max(now)).unwrap_or(u64::MAX));
        }
        for _ in 0..copies {
            self.sequence += 1;
            let flight = InFlight {
                deliver_at: departure + path.delay + jitter,
                sequence: self.sequence,
                datagram: datagram.clone(),
            };
            self.in_flight.push(Reverse(flight));
        }
    }

    /// Delivers a datagram right now, bypassing the network.
    pub fn inject(&mut self, datagram: &Datagram) {
        if datagram.to_server {
            if datagram.to == self.server_addr || self.extra_server_addrs.contains(&datagram.to) {
                self.server.handle_datagram(self.now, datagram.to, datagram.from, datagram.ecn, &datagram.payload);
            }
        } else if self.client_addrs.contains(&datagram.to) {
            self.client.handle_datagram(self.now, datagram.to, datagram.from, datagram.ecn, &datagram.payload);
        } else {
            self.undeliverable += 1;
        }
    }

    fn collect_transmits(&mut self) {
        let mut outgoing = Vec::new();
        for _ in 0..10_000 {
            let Some(tng_proto::Datagram { local, remote, ecn, payload }) = self.client.poll_datagram(self.now) else {
                break;
            };
            outgoing.push(Datagram { to_server: true, from: local, to: remote, ecn, payload });
        }
        for _ in 0..10_000 {
            let Some(tng_proto::Datagram { local, remote, ecn, payload }) = self.server.poll_datagram(self.now) else {
                break;
            };
            outgoing.push(Datagram { to_server: false, from: local, to: remote, ecn, payload });
        }
        for datagram in outgoing {
            self.send(datagram);
        }
    }

    /// Plays the application: records events, reads every readable stream, continues pending writes.
    fn play_application(&mut self) {
        for client_side in [true, false] {
            loop {
                let endpoint = if client_side { &mut self.client } else { &mut self.server };
                let Some((handle, event)) = endpoint.poll_event() else { break };
                let stream = match &event {
                    Event::StreamOpened(id) | Event::StreamReadable(id) => Some(*id),
                    _ => None,
                };
                if let Some(stream) = stream {
                    self.read_stream(client_side, handle, stream);
                }
                if client_side {
                    self.client_events.push((handle, event));
                } else {
                    self.server_events.push((handle, event));
                }
            }
        }
        self.continue_writes();
    }

    fn read_stream(&mut self, client_side: bool, handle: ConnectionHandle, stream: StreamId) {
        let endpoint = if client_side { &mut self.client } else { &mut self.server };
        let Some(connection) = endpoint.connection(handle) else { return };
        let received = if client_side { &mut self.client_received } else { &mut self.server_received };
        let entry = received.entry((handle, stream)).or_default();
        let buffer = &mut self.read_buffer;
        loop {
            match connection.read(stream, buffer) {
                Ok(ReadOutcome::Data(n)) => entry.data.extend_from_slice(&buffer[..n]),
                Ok(ReadOutcome::Finished) => {
                    entry.finished = true;
                    break;
                }
                Ok(_) | Err(_) => break,
            }
        }
    }

    fn continue_writes(&mut self) {
        let now = self.now;
        for write in &mut self.writes {
            let endpoint = if write.client_side { &mut self.client } else { &mut self.server };
            let Some(connection) = endpoint.connection(write.handle) else { continue };
            while write.written < write.data.len() {
                match connection.write(now, write.stream, &write.data[write.written..]) {
                    Ok(n) if n > 0 => write.written += n,
                    _ => break,
                }
            }
            if write.written == write.data.len() && write.finish {
                let _ = connection.finish(write.stream);
                write.finish = false;
            }
        }
        self.writes.retain(|write| write.written < write.data.len() || write.finish);
    }

    /// Opens a stream on the client and queues `data` (then FIN) on it; `None` if no stream could be opened.
    pub fn client_send(&mut self, handle: ConnectionHandle, data: Vec<u8>) -> Option<StreamId> {
        self.send_on_new_stream(true, handle, data)
    }

    /// Opens a stream on the server and queues `data` (then FIN) on it; `None` if no stream could be opened.
    pub fn server_send(&mut self, handle: ConnectionHandle, data: Vec<u8>) -> Option<StreamId> {
        self.send_on_new_stream(false, handle, data)
    }

    fn send_on_new_stream(&mut self, client_side: bool, handle: ConnectionHandle, data: Vec<u8>) -> Option<StreamId> {
        let endpoint = if client_side { &mut self.client } else { &mut self.server };
        let stream = endpoint.connection(handle)?.open_stream().ok()?;
        self.writes.push(PendingWrite { client_side, handle, stream, data, written: 0, finish: true });
        self.continue_writes();
        Some(stream)
    }

    /// One step: send what is due, then advance to the next event (delivery or timer) and process it. Returns
    /// false when nothing will ever happen again.
    pub fn step(&mut self) -> bool {
        self.play_application();
        self.collect_transmits();
        let next_delivery = self.in_flight.peek().map(|Reverse(flight)| flight.deliver_at);
        let next_timer = [self.client.poll_timeout(), self.server.poll_timeout()].into_iter().flatten().min();
        let Some(next) = [next_delivery, next_timer].into_iter().flatten().min() else {
            return false;
        };
        self.now = self.now.max(next);
        // Delivering sends nothing (what the endpoints answer leaves on the next step), so every datagram due now
        // can be taken out first, in delivery order.
        let mut due: Vec<InFlight> = Vec::new();
        while self.in_flight.peek().is_some_and(|Reverse(flight)| flight.deliver_at <= next) {
            due.extend(self.in_flight.pop().map(|Reverse(flight)| flight));
        }
        for flight in due {
            if !self.capture {
                self.inject(&flight.datagram);
                continue;
            }
            let dropped_before = self.client.stats().dropped() + self.server.stats().dropped();
            self.inject(&flight.datagram);
            let dropped_after = self.client.stats().dropped() + self.server.stats().dropped();
            if dropped_after == dropped_before {
                self.captured.push(flight.datagram);
            }
        }
        self.client.handle_timeout(self.now);
        self.server.handle_timeout(self.now);
        self.play_application();
        true
    }

    /// Steps until `done` holds or `limit` of virtual time passed; returns whether `done` held.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&Pair) -> bool) -> bool {
        let deadline = self.now + limit;
        let mut steps = 0u64;
        while self.now < deadline {
            if done(self) {
                return true;
            }
            if !self.step() {
                return done(self);
            }
            steps += 1;
            assert!(steps < 5_000_000, "livelock: {steps} steps without reaching the deadline");
        }
        done(self)
    }

    /// Steps for `duration` of virtual time.
    pub fn run_for(&mut self, duration: Duration) {
        self.run_until(duration, |_| false);
    }

    /// Whether the server's application read `expected` completely (with FIN) on some stream.
    pub fn server_got(&self, expected: &[u8]) -> bool {
        self.server_received.values().any(|received| received.finished && received.data == expected)
    }

    pub fn client_got(&self, expected: &[u8]) -> bool {
        self.client_received.values().any(|received| received.finished && received.data == expected)
    }

    /// Moves client path `index` to a new address (the network forgets the old one).
    pub fn move_client_path(&mut self, index: usize, new: SocketAddr) {
        let old = self.client_addrs[index];
        self.client_addrs[index] = new;
        self.client.local_address_changed(self.now, old, new);
    }

    /// Moves the server to a new address (the network forgets the old one).
    pub fn move_server(&mut self, new: SocketAddr) {
        let old = self.server_addr;
        self.server_addr = new;
        self.server.local_address_changed(self.now, old, new);
    }

    /// Bytes the server's application has read so far, over every stream.
    pub fn server_bytes_read(&self) -> usize {
        self.server_received.values().map(|received| received.data.len()).sum()
    }
}

/// Deterministic pseudo-random payload.
pub fn payload(len: usize, seed: u64) -> Vec<u8> {
    let mut bytes = vec![0; len];
    ChaCha20Rng::seed_from_u64(seed).fill_bytes(&mut bytes);
    bytes
}

/// A uniform draw in [0, 1).
pub fn unit(rng: &mut ChaCha20Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}
