//! End-to-end accuracy of linkem between two network namespaces (see `linkem::lab` for the topology).
//!
//! These tests need root (network namespaces); without it each one prints why it is skipped and returns. They run
//! one at a time, since each wants both cores for accurate timing.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use linkem::lab::{is_root, Lab, HOST_B_ADDRESS};
use linkem::traffic::{receive_udp, send_udp, SendPlan};
use socket2::SockRef;

const LINKEM: &str = env!("CARGO_BIN_EXE_linkem");
/// Interface MTU in the lab: full-sized TCP segments are IP packets of exactly this many bytes.
const MTU: f64 = 1500.0;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Takes the network-test lock and builds a lab, or explains the skip and returns `None` when not root.
fn lab(test: &str) -> Option<(MutexGuard<'static, ()>, Lab)> {
    if !is_root() {
        eprintln!("SKIP {test}: needs root to create network namespaces");
        return None;
    }
    let guard = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let lab = Lab::create("lkt").expect("create the namespace topology");
    Some((guard, lab))
}

fn udp_pair(lab: &Lab, port: u16) -> (UdpSocket, UdpSocket) {
    let target = SocketAddr::from((HOST_B_ADDRESS, port));
    let receiver = lab.host_b.run(|| UdpSocket::bind(target)).expect("bind in host B");
    let sender = lab
        .host_a
        .run(|| {
            let socket = UdpSocket::bind("0.0.0.0:0")?;
            socket.connect(target)?;
            Ok(socket)
        })
        .expect("connect from host A");
    (receiver, sender)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Median ping RTT from host A to host B in ms, over 21 pings 100 ms apart.
fn median_ping_ms(lab: &Lab) -> f64 {
    let output = lab
        .host_a
        .command("ping")
        .args(["-n", "-c", "21", "-i", "0.1", "-W", "2", &HOST_B_ADDRESS.to_string()])
        .output()
        .expect("run ping (Debian package iputils-ping)");
    let text = String::from_utf8_lossy(&output.stdout);
    let mut rtts: Vec<f64> = text
        .lines()
        .filter_map(|line| line.split("time=").nth(1))
        .filter_map(|rest| rest.trim_end_matches(" ms").trim().parse().ok())
        .collect();
    assert!(rtts.len() >= 18, "too few replies: {text}");
    median(&mut rtts)
}

/// The delay linkem adds, against the same path without it: the path's own latency (two veth hops and linkem's
/// user-space forwarding, which a loaded machine stretches) is not the emulator's to account for.
#[test]
fn ping_rtt_is_twice_the_one_way_delay() {
    let Some((_guard, lab)) = lab("ping_rtt_is_twice_the_one_way_delay") else {
        return;
    };
    let linkem = lab.start_linkem(Path::new(LINKEM), "", "", 1).expect("start linkem");
    let unimpaired_ms = median_ping_ms(&lab);
    let answer = linkem.request(r#"{"cmd":"set","dir":"both","spec":"delay=20ms"}"#).expect("set the delay");
    assert_eq!(answer["ok"], true, "{answer}");
    let delayed_ms = median_ping_ms(&lab);
    let added_ms = delayed_ms - unimpaired_ms;
    println!("ping: median RTT {delayed_ms:.3} ms, {unimpaired_ms:.3} ms without delay: {added_ms:.3} ms added (expected 40 ± 1 ms)");
    assert!((added_ms - 40.0).abs() <= 1.0, "median RTT {delayed_ms} ms, {unimpaired_ms} ms without delay");
}

#[test]
fn tcp_bulk_fills_a_20_mbit_link() {
    let Some((_guard, lab)) = lab("tcp_bulk_fills_a_20_mbit_link") else {
        return;
    };
    let spec = "rate=20mbit,delay=5ms,queue=100pkt";
    let linkem = lab.start_linkem(Path::new(LINKEM), spec, spec, 1).expect("start linkem");
    let address = SocketAddr::from((HOST_B_ADDRESS, 5201));
    let listener = lab.host_b.run(|| TcpListener::bind(address)).expect("listen in host B");
    let mut sender = lab
        .host_a
        .run(|| {
            let stream = TcpStream::connect_timeout(&address, Duration::from_secs(3))?;
            // CUBIC keeps the 100-packet queue from draining after a loss; BBR's ProbeRTT would empty it.
            SockRef::from(&stream).set_tcp_congestion(b"cubic")?;
            Ok(stream)
        })
        .expect("connect from host A");
    let (mut receiver, _) = listener.accept().expect("accept");
    let mss = SockRef::from(&sender).tcp_mss().expect("read the MSS");

    let start = Instant::now();
    let window = start + Duration::from_secs(2)..start + Duration::from_secs(7);
    let stop = window.end;
    let window_bytes = thread::scope(|scope| {
        let reading = scope.spawn(move || -> io::Result<u64> {
            receiver.set_read_timeout(Some(Duration::from_millis(200)))?;
            let mut buffer = vec![0u8; 1 << 16];
            let mut in_window = 0u64;
            while Instant::now() < stop {
                match receiver.read(&mut buffer) {
                    Ok(0) => break,
                    Ok(n) if window.contains(&Instant::now()) => in_window += n as u64,
                    Ok(_) => {}
                    Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(in_window)
        });
        let chunk = vec![0x5au8; 1 << 16];
        sender.set_write_timeout(Some(Duration::from_millis(200))).expect("write timeout");
        while Instant::now() < stop {
            match sender.write(&chunk) {
                Ok(_) => {}
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
                Err(e) => panic!("send failed: {e}"),
            }
        }
        reading.join().expect("receiver thread").expect("receive")
    });
    let goodput = window_bytes as f64 * 8.0 / 5.0;
    // Every segment is a full 1500-byte IP packet carrying `mss` bytes of payload (MSS already excludes the TCP
    // timestamp option), so the IP rate on the link is goodput * 1500 / mss. ACKs use the other direction.
    let ip_rate = goodput * MTU / f64::from(mss);
    let counters = linkem.counters().expect("counters");
    println!(
        "tcp: goodput {:.3} Mbit/s, MSS {mss}, IP rate on the link {:.3} Mbit/s (expected 20 ± 5%); ab counters {}",
        goodput / 1e6,
        ip_rate / 1e6,
        counters["ab"]
    );
    assert!((ip_rate / 20e6 - 1.0).abs() < 0.05, "IP rate {ip_rate} bit/s");
}

#[test]
fn measured_loss_is_within_the_binomial_interval_and_outages_work() {
    let Some((_guard, lab)) = lab("measured_loss_is_within_the_binomial_interval_and_outages_work") else {
        return;
    };
    let linkem = lab.start_linkem(Path::new(LINKEM), "loss=5%", "", 7).expect("start linkem");
    let (receiver, sender) = udp_pair(&lab, 9001);
    let send = |packets: u64| {
        let start = Instant::now();
        let stop = start + Duration::from_secs(3);
        thread::scope(|scope| {
            let counting = scope.spawn(|| receive_udp(&receiver, start..stop, stop));
            let plan = SendPlan {
                payload_bytes: 100,
                packets_per_second: Some(4000.0),
                max_packets: Some(packets),
                stop_at: stop,
            };
            let sent = send_udp(&sender, plan).expect("send");
            (sent, counting.join().expect("receiver thread").expect("receive").packets)
        })
    };

    let packets = 4000;
    let (sent, received) = send(packets);
    assert_eq!(sent, packets);
    let lost = sent - received;
    let measured = lost as f64 / sent as f64;
    let p = 0.05;
    let half_width = 2.576 * (p * (1.0 - p) / sent as f64).sqrt();
    let counters = linkem.counters().expect("counters");
    println!(
        "loss: {lost} of {sent} = {:.3}% (99% interval {:.3}%..{:.3}%); ab counters {}",
        measured * 100.0,
        (p - half_width) * 100.0,
        (p + half_width) * 100.0,
        counters["ab"]
    );
    assert!((measured - p).abs() <= half_width, "measured loss {measured}");
    assert_eq!(counters["ab"]["dropped_loss"], lost, "every loss is the loss model's");
    assert_eq!(counters["ab"]["forwarded_packets"], received);

    let answer = linkem.request(r#"{"cmd":"set","dir":"ab","spec":"loss=100%"}"#).expect("set");
    assert_eq!(answer["ok"], true, "{answer}");
    let (sent, received) = send(200);
    assert_eq!((sent, received), (200, 0), "an outage delivers nothing");
}

#[test]
fn constant_rate_trace_delivers_its_mean_rate() {
    let Some((_guard, lab)) = lab("constant_rate_trace_delivers_its_mean_rate") else {
        return;
    };
    // One opportunity per millisecond for one second, looping: 1000 packets/s, 12 Mbit/s of 1500-byte packets.
    let trace_path = std::env::temp_dir().join(format!("{}.trace", lab.link.name()));
    let trace: String = (1..=1000).map(|ms| format!("{ms}\n")).collect();
    std::fs::write(&trace_path, trace).expect("write the trace");
    let spec = format!("trace={},queue=100pkt", trace_path.display());
    let linkem = lab.start_linkem(Path::new(LINKEM), &spec, "", 1);
    std::fs::remove_file(&trace_path).expect("remove the trace");
    let linkem = linkem.expect("start linkem");
    let (receiver, sender) = udp_pair(&lab, 9002);

    let start = Instant::now();
    let window = start + Duration::from_secs(1)..start + Duration::from_millis(4500);
    let stop = window.end;
    let tally = thread::scope(|scope| {
        let counting = scope.spawn(|| receive_udp(&receiver, window.clone(), stop));
        // 1472-byte payloads make 1500-byte IP packets; offering 1500/s keeps the queue full.
        let plan = SendPlan { payload_bytes: 1472, packets_per_second: Some(1500.0), max_packets: None, stop_at: stop };
        send_udp(&sender, plan).expect("send");
        counting.join().expect("receiver thread").expect("receive")
    });
    let rate = tally.window_packets_per_second().expect("packets in the window");
    let counters = linkem.counters().expect("counters");
    println!(
        "trace: delivered {rate:.1} packets/s = {:.3} Mbit/s (expected 1000/s = 12 Mbit/s ± 3%); ab counters {}",
        rate * 1500.0 * 8.0 / 1e6,
        counters["ab"]
    );
    assert!((rate / 1000.0 - 1.0).abs() < 0.03, "delivered {rate} packets/s");
}
