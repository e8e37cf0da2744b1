//! A server endpoint under a fuzzed handshake schedule: genuine clients connect (through RETRY when the server asks
//! for it) while the schedule delivers, drops, mutates and replays their datagrams, replays them from spoofed
//! addresses, and injects crafted INITIAL and RETRY packets (fuzzed stage, connection id, token and Noise bytes) and
//! raw bytes. Checked: no panic; the server never sends an address that no genuine client uses more than three
//! times the bytes it received from it (anti-amplification); afterwards a fresh client on a clean network connects.

#![no_main]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use tng_proto::{Endpoint, EndpointConfig, Event, RetryPolicy, ServerConfig, StaticKeypair, Time};
use tng_wire::{Feedback, Flags, Handshake, Packet, Payload, Stage};

const MAX_OPS: usize = 32;
const MAX_CLIENTS: usize = 3;

fn server_addr() -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 1], 4477))
}

fn client_addr(index: usize) -> SocketAddr {
    SocketAddr::from(([10, 1, index as u8, 2], 5000))
}

/// An address no genuine client uses.
fn spoofed(u: &mut Unstructured<'_>) -> Result<SocketAddr> {
    Ok(SocketAddr::from(([10, 9, u.int_in_range(0..=3)?, 9], u.int_in_range(1000..=1003)?)))
}

struct World {
    now: Time,
    server: Endpoint,
    clients: Vec<Endpoint>,
    /// Datagrams the genuine clients sent, by client, in order (kept for replays).
    from_clients: Vec<(usize, Vec<u8>)>,
    /// Datagrams the server sent to genuine clients, not yet delivered.
    to_clients: Vec<(usize, Vec<u8>)>,
    /// Connection ids seen on the wire, so crafted packets can name real connections.
    connection_ids: Vec<u64>,
    /// Per remote address: bytes the server received from it and sent to it.
    traffic: BTreeMap<SocketAddr, (u64, u64)>,
}

impl World {
    fn new(retry: RetryPolicy) -> World {
        let config = EndpointConfig {
            server: Some(ServerConfig { retry, max_connections: MAX_CLIENTS + 1 }),
            ..EndpointConfig::server()
        };
        World {
            now: Time::ZERO,
            server: Endpoint::new(config, StaticKeypair::from_seed(1), 1),
            clients: Vec::new(),
            from_clients: Vec::new(),
            to_clients: Vec::new(),
            connection_ids: Vec::new(),
            traffic: BTreeMap::new(),
        }
    }

    fn note_connection_id(&mut self, datagram: &[u8]) {
        if let Ok(packet) = Packet::parse(datagram) {
            if !self.connection_ids.contains(&packet.connection_id) {
                self.connection_ids.push(packet.connection_id);
            }
        }
    }

    fn to_server(&mut self, from: SocketAddr, datagram: &[u8]) {
        self.traffic.entry(from).or_default().0 += datagram.len() as u64;
        self.server.handle_datagram(self.now, server_addr(), from, None, datagram);
    }

    /// Moves everything the endpoints want to send now into the world's queues.
    fn collect(&mut self) {
        while let Some(transmit) = self.server.poll_datagram(self.now) {
            self.traffic.entry(transmit.remote).or_default().1 += transmit.payload.len() as u64;
            self.note_connection_id(&transmit.payload);
            if let Some(client) = (0..self.clients.len()).find(|&i| client_addr(i) == transmit.remote) {
                self.to_clients.push((client, transmit.payload));
            }
        }
        for index in 0..self.clients.len() {
            while let Some(transmit) = self.clients[index].poll_datagram(self.now) {
                self.note_connection_id(&transmit.payload);
                self.from_clients.push((index, transmit.payload));
            }
        }
    }

    fn check_amplification(&self) {
        for (address, &(received, sent)) in &self.traffic {
            let genuine = (0..self.clients.len()).any(|i| client_addr(i) == *address);
            assert!(genuine || sent <= 3 * received, "{address} was sent {sent} bytes for {received} received");
        }
    }

    fn op(&mut self, u: &mut Unstructured<'_>) -> Result<()> {
        match u.int_in_range(0..=7u8)? {
            0 if self.clients.len() < MAX_CLIENTS => {
                let index = self.clients.len();
                let mut client =
                    Endpoint::new(EndpointConfig::client(), StaticKeypair::from_seed(10 + index as u64), index as u64);
                client.connect(self.now, &[(client_addr(index), server_addr())], None).expect("connect");
                self.clients.push(client);
            }
            // A genuine client datagram, maybe mutated, from its own or a spoofed address.
            1 | 2 if !self.from_clients.is_empty() => {
                let (client, mut datagram) = self.from_clients[u.choose_index(self.from_clients.len())?].clone();
                if u.ratio(1, 3)? && !datagram.is_empty() {
                    let at = u.choose_index(datagram.len())?;
                    datagram[at] ^= u.int_in_range(1..=255)?;
                }
                let from = if u.ratio(1, 3)? { spoofed(u)? } else { client_addr(client) };
                self.to_server(from, &datagram);
            }
            // A server datagram to its client, maybe mutated, or lost.
            3 if !self.to_clients.is_empty() => {
                let (client, mut datagram) = self.to_clients.remove(u.choose_index(self.to_clients.len())?);
                if u.ratio(1, 4)? {
                    return Ok(());
                }
                if u.ratio(1, 4)? && !datagram.is_empty() {
                    let at = u.choose_index(datagram.len())?;
                    datagram[at] ^= u.int_in_range(1..=255)?;
                }
                self.clients[client].handle_datagram(self.now, client_addr(client), server_addr(), None, &datagram);
            }
            // A crafted INITIAL or RETRY: valid framing, fuzzed content.
            4 | 5 => {
                let connection_id = match self.connection_ids.len() {
                    0 => u.arbitrary()?,
                    n if u.ratio(3, 4)? => self.connection_ids[u.choose_index(n)?],
                    _ => u.arbitrary()?,
                };
                let token: &[u8] = u.arbitrary()?;
                let noise: &[u8] = u.arbitrary()?;
                let payload = match u.int_in_range(0..=3u8)? {
                    0 => Payload::Retry { token },
                    1 => Payload::Initial(Handshake::new(Stage::ClientHello, token, noise)),
                    2 => Payload::Initial(Handshake::new(Stage::ServerHello, &[], noise)),
                    _ => Payload::Initial(Handshake::new(Stage::ClientFinish, &[], noise)),
                };
                let packet = Packet {
                    flags: Flags::EMPTY,
                    channel_id: 0,
                    connection_id,
                    packet_number: u.arbitrary()?,
                    feedback: Feedback::NEUTRAL,
                    payload,
                };
                let mut datagram = Vec::new();
                if packet.encode(&mut datagram).is_err() {
                    return Ok(());
                }
                let to_client = !self.clients.is_empty() && u.ratio(1, 3)?;
                if to_client {
                    let client = u.choose_index(self.clients.len())?;
                    self.clients[client].handle_datagram(self.now, client_addr(client), server_addr(), None, &datagram);
                } else {
                    let from = if self.clients.is_empty() || u.arbitrary()? {
                        spoofed(u)?
                    } else {
                        client_addr(u.choose_index(self.clients.len())?)
                    };
                    self.to_server(from, &datagram);
                }
            }
            6 => {
                let bytes: &[u8] = u.arbitrary()?;
                let from = spoofed(u)?;
                self.to_server(from, bytes);
            }
            _ => {
                self.now += Duration::from_millis(u.int_in_range(1..=3_000)?);
                self.server.handle_timeout(self.now);
                for client in &mut self.clients {
                    client.handle_timeout(self.now);
                }
            }
        }
        Ok(())
    }
}

/// A fresh client on a clean network after the schedule connects within a minute (trying again while the server
/// refuses it: the schedule may have filled every slot with handshakes that only time out).
fn fresh_client_connects(world: &mut World) -> bool {
    let address = SocketAddr::from(([10, 3, 0, 2], 6000));
    let mut client = Endpoint::new(EndpointConfig::client(), StaticKeypair::from_seed(99), 99);
    let deadline = world.now + Duration::from_secs(60);
    let mut handle = client.connect(world.now, &[(address, server_addr())], None).expect("connect");
    for _ in 0..10_000 {
        if world.now >= deadline {
            break;
        }
        while let Some(transmit) = client.poll_datagram(world.now) {
            world.server.handle_datagram(world.now, server_addr(), address, None, &transmit.payload);
        }
        while let Some(transmit) = world.server.poll_datagram(world.now) {
            if transmit.remote == address {
                client.handle_datagram(world.now, address, server_addr(), None, &transmit.payload);
            }
        }
        while let Some((h, event)) = client.poll_event() {
            match event {
                Event::Connected { .. } if h == handle => return true,
                Event::HandshakeFailed { .. } if h == handle => {
                    handle = client.connect(world.now, &[(address, server_addr())], None).expect("connect");
                }
                _ => {}
            }
        }
        let next = [world.server.poll_timeout(), client.poll_timeout()].into_iter().flatten().min();
        let Some(next) = next else { return false };
        world.now = world.now.max(next);
        world.server.handle_timeout(world.now);
        client.handle_timeout(world.now);
    }
    false
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let retry = match u.int_in_range(0..=2u8).unwrap_or(0) {
        0 => RetryPolicy::Never,
        1 => RetryPolicy::Always,
        _ => RetryPolicy::WhenBusy { max_pending: usize::from(u.int_in_range(1..=3u8).unwrap_or(1)) },
    };
    let mut world = World::new(retry);
    for _ in 0..MAX_OPS {
        if world.op(&mut u).is_err() {
            break;
        }
        world.collect();
        world.check_amplification();
    }
    assert!(fresh_client_connects(&mut world), "a fresh client could not connect after the schedule");
});
