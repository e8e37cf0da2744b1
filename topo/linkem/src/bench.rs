//! `linkem bench`: the highest forwarding rate linkem sustains with no emulation (unlimited rate, zero delay).
//!
//! A UDP sender in host A's namespace blasts at full speed through linkem to a receiver in host B's namespace; the
//! delivered rate over the measurement window is linkem's forwarding capacity on this machine (sender, receiver
//! and linkem share the same cores, as they do in experiments).

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use crate::lab::{Lab, HOST_B_ADDRESS};
use crate::traffic::{receive_udp, send_udp, SendPlan, IPV4_UDP_HEADER_BYTES};

const BENCH_PORT: u16 = 9000;
/// Traffic before the window lets queues and socket buffers reach their steady state.
const WARM_UP: Duration = Duration::from_millis(500);
/// The receiver keeps counting after the sender stops so that nothing in flight is missed.
const DRAIN: Duration = Duration::from_millis(300);

#[derive(Debug, Serialize)]
pub struct BenchReport {
    pub seconds: f64,
    pub payload_bytes: usize,
    pub ip_packet_bytes: u64,
    pub offered_packets_per_second: f64,
    pub forwarded_packets_per_second: f64,
    /// Delivered IP bytes (payload + 28 header bytes) per second, in Mbit/s.
    pub forwarded_mbit_per_second: f64,
    /// Fraction of the offered packets that did not arrive; the counters tell where they were dropped.
    pub loss_fraction: f64,
    pub linkem_counters: Value,
}

/// Runs the benchmark with the linkem binary at `executable`.
pub fn run(executable: &Path, seconds: f64, payload_bytes: usize) -> io::Result<BenchReport> {
    let lab = Lab::create("lkb")?;
    let linkem = lab.start_linkem(executable, "", "", 1)?;
    let target = SocketAddr::from((HOST_B_ADDRESS, BENCH_PORT));
    let receiver = lab.host_b.run(|| UdpSocket::bind(target))?;
    let sender = lab.host_a.run(|| {
        let socket = UdpSocket::bind("0.0.0.0:0")?;
        socket.connect(target)?;
        Ok(socket)
    })?;
    let measure = Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let window = start + WARM_UP..start + WARM_UP + measure;
    let send_stop = window.end;
    let receive_stop = send_stop + DRAIN;
    let (sent, tally) = thread::scope(|scope| {
        let counting = scope.spawn(|| receive_udp(&receiver, window.clone(), receive_stop));
        let plan = SendPlan { payload_bytes, packets_per_second: None, max_packets: None, stop_at: send_stop };
        let sent = send_udp(&sender, plan);
        let tally = counting.join().unwrap_or_else(|_| Err(io::Error::other("receiver thread panicked")));
        (sent, tally)
    });
    let (sent, tally) = (sent?, tally?);
    let sending_seconds = send_stop.duration_since(start).as_secs_f64();
    let ip_packet_bytes = payload_bytes as u64 + IPV4_UDP_HEADER_BYTES;
    let window_seconds = measure.as_secs_f64();
    Ok(BenchReport {
        seconds: window_seconds,
        payload_bytes,
        ip_packet_bytes,
        offered_packets_per_second: sent as f64 / sending_seconds,
        forwarded_packets_per_second: tally.window_packets as f64 / window_seconds,
        forwarded_mbit_per_second: (tally.window_packets * ip_packet_bytes * 8) as f64 / window_seconds / 1e6,
        loss_fraction: 1.0 - tally.packets as f64 / sent.max(1) as f64,
        linkem_counters: linkem.counters()?,
    })
}
