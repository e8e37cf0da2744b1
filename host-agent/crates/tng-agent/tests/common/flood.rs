//! A handshake flood on loopback: stage-1 INITIALs (made by a tng-proto client endpoint, so the server must do the
//! handshake's work for each it accepts) from many source addresses and ports that never answer, and a legitimate
//! client that times its handshake. Shared by the `handshake_flood` test and the bench of the same name.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tng_proto::{Endpoint, EndpointConfig, Event, Identity, StaticKeypair, Time};
use tng_wire::{Packet, Payload};

/// What the flood's sources sent and got back.
#[derive(Debug, Default)]
pub struct FloodReport {
    pub initials_sent: u64,
    /// RETRY packets the server answered with.
    pub retries_received: u64,
    /// Per source address: (bytes sent to the server, bytes received from it).
    pub per_address: BTreeMap<IpAddr, (u64, u64)>,
}

/// A running flood; [`Flood::stop`] ends it and reports.
pub struct Flood {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<FloodReport>,
}

/// How long the sources keep listening after the last INITIAL: the server's retransmissions count too.
const LISTEN_AFTER: Duration = Duration::from_secs(2);

impl Flood {
    /// Floods `server` from `addresses` source addresses (127.0.0.2, 127.0.0.3, ...) with `ports` sockets each;
    /// every `interval` each socket sends its INITIAL (a provisional connection id of its own) again.
    pub fn start(server: SocketAddr, addresses: u8, ports: usize, interval: Duration) -> Flood {
        let (sockets, initials) = sources(server, addresses, ports);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || run(server, &sockets, &initials, interval, &stopped));
        Flood { stop, thread }
    }

    pub fn stop(self) -> FloodReport {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("the flood thread")
    }
}

/// The flood's sockets, each with its INITIAL.
fn sources(server: SocketAddr, addresses: u8, ports: usize) -> (Vec<UdpSocket>, Vec<Vec<u8>>) {
    let sockets: Vec<UdpSocket> = (0..addresses)
        .flat_map(|i| (0..ports).map(move |_| Ipv4Addr::new(127, 0, 0, 2 + i)))
        .map(|ip| {
            let socket = UdpSocket::bind((ip, 0)).expect("bind a flood source");
            socket.set_nonblocking(true).unwrap();
            socket
        })
        .collect();
    // One INITIAL per socket, made once: the flood then costs its sender no cryptography, only the server.
    let mut endpoint = Endpoint::new(EndpointConfig::client(), StaticKeypair::from_seed(17), 17);
    let initials: Vec<Vec<u8>> = sockets
        .iter()
        .map(|socket| {
            endpoint.connect(Time::ZERO, &[(socket.local_addr().unwrap(), server)], None).expect("a client connection");
            // The first datagram of a new connection is its stage-1 INITIAL.
            endpoint.poll_datagram(Time::ZERO).expect("an INITIAL").payload
        })
        .collect();
    (sockets, initials)
}

fn run(
    server: SocketAddr,
    sockets: &[UdpSocket],
    initials: &[Vec<u8>],
    interval: Duration,
    stop: &AtomicBool,
) -> FloodReport {
    let mut report = FloodReport::default();
    let mut buffer = [0u8; 2048];
    let mut stopped_at = None;
    loop {
        if stopped_at.is_none() && stop.load(Ordering::Relaxed) {
            stopped_at = Some(Instant::now());
        }
        if stopped_at.is_some_and(|at| at.elapsed() >= LISTEN_AFTER) {
            return report;
        }
        let round = Instant::now();
        for (socket, initial) in sockets.iter().zip(initials) {
            let local = socket.local_addr().unwrap();
            if stopped_at.is_none() && socket.send_to(initial, server).is_ok() {
                report.initials_sent += 1;
                report.per_address.entry(local.ip()).or_default().0 += initial.len() as u64;
            }
            loop {
                match socket.recv_from(&mut buffer) {
                    Ok((len, _)) => {
                        report.per_address.entry(local.ip()).or_default().1 += len as u64;
                        if matches!(Packet::parse(&buffer[..len]).map(|p| p.payload), Ok(Payload::Retry { .. })) {
                            report.retries_received += 1;
                        }
                    }
                    Err(error) if error.kind() == ErrorKind::WouldBlock => break,
                    Err(error) => panic!("flood source {local}: {error}"),
                }
            }
        }
        std::thread::sleep(interval.saturating_sub(round.elapsed()));
    }
}

/// One handshake with `server` (pinned to `identity`) from 127.0.0.1 by a tng-proto client: how long from its first
/// INITIAL until it is connected (a RETRY on the way included).
pub fn handshake(server: SocketAddr, identity: Identity, seed: u64) -> Result<Duration, String> {
    let socket = UdpSocket::bind("127.0.0.1:0").map_err(|error| error.to_string())?;
    let local = socket.local_addr().unwrap();
    let mut endpoint = Endpoint::new(EndpointConfig::client(), StaticKeypair::from_seed(seed), seed);
    let started = Instant::now();
    let now = || Time::from_nanos(started.elapsed().as_nanos() as u64);
    endpoint.connect(now(), &[(local, server)], Some(identity)).map_err(|error| format!("{error:?}"))?;
    let mut buffer = [0u8; 2048];
    while started.elapsed() < Duration::from_secs(20) {
        while let Some(transmit) = endpoint.poll_datagram(now()) {
            socket.send_to(&transmit.payload, transmit.remote).map_err(|error| error.to_string())?;
        }
        while let Some((_, event)) = endpoint.poll_event() {
            match event {
                Event::Connected { .. } => return Ok(started.elapsed()),
                Event::HandshakeFailed { reason } => return Err(format!("handshake failed: {reason:?}")),
                _ => {}
            }
        }
        let wait = endpoint.poll_timeout().map_or(Duration::from_millis(50), |at| at.saturating_since(now()));
        socket.set_read_timeout(Some(wait.clamp(Duration::from_micros(100), Duration::from_millis(50)))).unwrap();
        match socket.recv_from(&mut buffer) {
            Ok((len, from)) => endpoint.handle_datagram(now(), local, from, None, &buffer[..len]),
            Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(error) => return Err(error.to_string()),
        }
        endpoint.handle_timeout(now());
    }
    Err("no handshake within 20 s".into())
}
