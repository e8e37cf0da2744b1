//! Benchmark: protocol packets sealed by one endpoint and opened and parsed by another, per second of one core.
//!
//! Two endpoints run in memory on virtual time with a lossless, instant network; the wall-clock cost is therefore
//! all protocol work: framing, sealing, opening, parsing, acknowledging. `--json` prints one object.
//!
//! `--bytes N` instead transfers exactly N bytes of stream data and reports the packets it took, with no clock in
//! the loop: the same run every time, for counting instructions per packet under callgrind.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tng_proto::{Endpoint, EndpointConfig, Event, StaticKeypair, Time};

const CHUNK: usize = 64 * 1024;

fn main() {
    let json = std::env::args().any(|a| a == "--json");
    let seconds: f64 = flag_value("--seconds").unwrap_or(3.0);
    let fixed_bytes: Option<u64> = flag_value("--bytes");
    let client_addr: SocketAddr = "10.0.0.1:4477".parse().expect("address");
    let server_addr: SocketAddr = "10.0.0.2:4477".parse().expect("address");
    let mut client = Endpoint::new(EndpointConfig::client(), StaticKeypair::from_seed(1), 1);
    let mut server = Endpoint::new(EndpointConfig::server(), StaticKeypair::from_seed(2), 2);
    let mut now = Time::ZERO;
    let conn = client.connect(now, &[(client_addr, server_addr)], None).expect("connect");
    let mut stream = None;
    let mut accepted = Vec::new();
    let payload = vec![0x5au8; CHUNK];
    let mut read_buf = vec![0u8; CHUNK];
    let mut datagram = Vec::new();
    let (mut packets, mut bytes, mut delivered) = (0u64, 0u64, 0u64);
    let mut measuring_since: Option<(Instant, u64, u64)> = None;
    let wall = Instant::now();
    loop {
        // Client -> server and server -> client, all that is ready.
        let mut moved = false;
        // One buffer for every datagram, as a driver's send batch is.
        loop {
            datagram.clear();
            let Some(t) = client.poll_transmit(now, &mut datagram) else { break };
            packets += 1;
            bytes += t.size as u64;
            server.handle_datagram(now, t.remote, t.local, t.ecn, &datagram);
            moved = true;
        }
        loop {
            datagram.clear();
            let Some(t) = server.poll_transmit(now, &mut datagram) else { break };
            client.handle_datagram(now, t.remote, t.local, t.ecn, &datagram);
            moved = true;
        }
        while let Some((_, event)) = client.poll_event() {
            if let Event::Connected { .. } = event {
                let c = client.connection(conn).expect("connection");
                stream = Some(c.open_stream().expect("stream"));
            }
        }
        while server.poll_event().is_some() {}
        if let (Some(id), Some(c)) = (stream, client.connection(conn)) {
            while c.write(now, id, &payload).unwrap_or(0) > 0 {}
        }
        for handle in server.connection_handles() {
            if let Some(c) = server.connection(handle) {
                while let Some(id) = c.accept_stream() {
                    accepted.push(id);
                }
                for &id in &accepted {
                    while let Ok(tng_proto::ReadOutcome::Data(n)) = c.read(id, &mut read_buf) {
                        delivered += n as u64;
                    }
                }
            }
        }
        if let Some(target) = fixed_bytes.filter(|&target| delivered >= target) {
            report_fixed(json, target, packets, delivered);
            return;
        }
        if fixed_bytes.is_none() && stream.is_some() && measuring_since.is_none() && delivered > 0 {
            measuring_since = Some((Instant::now(), packets, delivered));
        }
        if let Some((since, p0, _)) = measuring_since {
            if since.elapsed().as_secs_f64() >= seconds {
                let elapsed = since.elapsed().as_secs_f64();
                let (_, _, d0) = measuring_since.expect("measuring");
                let pps = (packets - p0) as f64 / elapsed;
                let goodput = (delivered - d0) as f64 * 8.0 / elapsed / 1e6;
                report(json, pps, goodput, bytes as f64 / packets.max(1) as f64);
                return;
            }
        }
        // A fixed transfer may run slowly under callgrind, so its bound is virtual time, never the wall clock.
        let stuck = match fixed_bytes {
            Some(_) => now > Time::ZERO + Duration::from_secs(60),
            None => wall.elapsed() > Duration::from_secs(60),
        };
        if stuck {
            eprintln!("codec_bench: no steady transfer within 60 s");
            std::process::exit(1);
        }
        // Advance virtual time to the next timer (pacing, ACK delay) when nothing moved.
        if !moved {
            let next = [client.poll_timeout(), server.poll_timeout()].into_iter().flatten().min();
            now = next.map_or(now + Duration::from_millis(1), |t| t.max(now));
            client.handle_timeout(now);
            server.handle_timeout(now);
        }
    }
}

fn flag_value<T: std::str::FromStr>(flag: &str) -> Option<T> {
    let value = std::env::args().skip_while(|a| a != flag).nth(1)?;
    match value.parse() {
        Ok(parsed) => Some(parsed),
        Err(_) => {
            eprintln!("codec_bench: {flag} needs a number, got {value:?}");
            std::process::exit(2);
        }
    }
}

fn report_fixed(json: bool, target: u64, packets: u64, delivered: u64) {
    if json {
        println!(
            "{{\"benchmark\":\"protocol_fixed_transfer\",\"bytes_asked\":{target},\"bytes_delivered\":{delivered},\
             \"data_packets\":{packets}}}"
        );
    } else {
        println!("protocol: {delivered} bytes of stream data delivered in {packets} client packets");
    }
}

fn report(json: bool, pps: f64, goodput_mbps: f64, mean_packet: f64) {
    if json {
        println!(
            "{{\"benchmark\":\"protocol_packets\",\"packets_sealed_and_opened_per_sec\":{pps:.0},\
             \"stream_goodput_mbps\":{goodput_mbps:.1},\"mean_packet_bytes\":{mean_packet:.0},\"cores\":1}}"
        );
    } else {
        println!(
            "protocol: {pps:.0} packets/s sealed+opened+parsed on one core ({goodput_mbps:.0} Mbit/s of stream data, \
             mean packet {mean_packet:.0} B)"
        );
    }
}
