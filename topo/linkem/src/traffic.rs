//! UDP traffic for the accuracy tests and the benchmark: a paced or unpaced sender and a counting receiver.
//!
//! Every datagram starts with its 8-byte sequence number; the receiver counts datagrams and bytes in total and
//! inside a measurement window of receive times.

use std::io;
use std::net::UdpSocket;
use std::ops::Range;
use std::thread;
use std::time::{Duration, Instant};

use socket2::SockRef;

/// IPv4 (20) and UDP (8) header bytes on top of a datagram's payload.
pub const IPV4_UDP_HEADER_BYTES: u64 = 28;
const SOCKET_BUFFER_BYTES: usize = 8 << 20;
const RECEIVE_POLL: Duration = Duration::from_millis(20);
/// Pacing granularity: the sender catches up on its schedule this often.
const PACING_TICK: Duration = Duration::from_micros(200);

/// How fast and how long to send.
#[derive(Debug, Clone, Copy)]
pub struct SendPlan {
    pub payload_bytes: usize,
    /// `None` sends as fast as the socket accepts.
    pub packets_per_second: Option<f64>,
    pub max_packets: Option<u64>,
    pub stop_at: Instant,
}

/// Sends datagrams on a connected socket; returns how many the kernel accepted.
pub fn send_udp(socket: &UdpSocket, plan: SendPlan) -> io::Result<u64> {
    SockRef::from(socket).set_send_buffer_size(SOCKET_BUFFER_BYTES)?;
    let mut payload = vec![0u8; plan.payload_bytes.max(8)];
    let started = Instant::now();
    let mut sent: u64 = 0;
    while Instant::now() < plan.stop_at && plan.max_packets.is_none_or(|max| sent < max) {
        if let Some(rate) = plan.packets_per_second {
            let due = (started.elapsed().as_secs_f64() * rate) as u64;
            if sent >= due {
                thread::sleep(PACING_TICK);
                continue;
            }
        }
        payload[..8].copy_from_slice(&sent.to_be_bytes());
        match socket.send(&payload) {
            Ok(_) => sent += 1,
            // The local queue is full: the datagram was not sent; try again.
            Err(error) if error.raw_os_error() == Some(libc::ENOBUFS) => thread::yield_now(),
            Err(error) => return Err(error),
        }
    }
    Ok(sent)
}

/// What a receiver counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpTally {
    pub packets: u64,
    pub bytes: u64,
    pub window_packets: u64,
    pub window_bytes: u64,
    /// Receive times of the first and last datagram inside the window.
    pub window_first: Option<Instant>,
    pub window_last: Option<Instant>,
}

impl UdpTally {
    /// Packets per second between the first and last datagram of the window (independent of window edges).
    pub fn window_packets_per_second(&self) -> Option<f64> {
        let (first, last) = (self.window_first?, self.window_last?);
        let seconds = last.duration_since(first).as_secs_f64();
        (self.window_packets >= 2 && seconds > 0.0).then(|| (self.window_packets - 1) as f64 / seconds)
    }
}

/// Counts datagrams until `stop_at`.
pub fn receive_udp(socket: &UdpSocket, window: Range<Instant>, stop_at: Instant) -> io::Result<UdpTally> {
    SockRef::from(socket).set_recv_buffer_size(SOCKET_BUFFER_BYTES)?;
    socket.set_read_timeout(Some(RECEIVE_POLL))?;
    let mut buffer = vec![0u8; 65536];
    let mut tally = UdpTally::default();
    while Instant::now() < stop_at {
        let length = match socket.recv(&mut buffer) {
            Ok(length) => length as u64,
            Err(error) if matches!(error.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => continue,
            Err(error) => return Err(error),
        };
        let now = Instant::now();
        tally.packets += 1;
        tally.bytes += length;
        if window.contains(&now) {
            tally.window_packets += 1;
            tally.window_bytes += length;
            tally.window_first.get_or_insert(now);
            tally.window_last = Some(now);
        }
    }
    Ok(tally)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paced_sender_and_receiver_agree_on_loopback() {
        let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        sender.connect(receiver.local_addr().unwrap()).unwrap();
        let start = Instant::now();
        let stop = start + Duration::from_millis(700);
        let counter = thread::spawn(move || receive_udp(&receiver, start..stop, stop).unwrap());
        let plan = SendPlan {
            payload_bytes: 100,
            packets_per_second: Some(1000.0),
            max_packets: Some(300),
            stop_at: start + Duration::from_millis(500),
        };
        let sent = send_udp(&sender, plan).unwrap();
        let tally = counter.join().unwrap();
        assert_eq!(sent, 300);
        assert_eq!(tally.packets, 300);
        assert_eq!(tally.bytes, 300 * 100);
        let rate = tally.window_packets_per_second().unwrap();
        assert!((rate - 1000.0).abs() < 100.0, "paced at {rate} packets/s");
    }
}
