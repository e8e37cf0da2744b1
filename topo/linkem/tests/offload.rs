//! linkem between veths that keep transmit checksum offload on: the hosts hand it TCP and UDP frames with partial
//! checksums (CHECKSUM_PARTIAL), which linkem must complete, or the receiving host drops every one of them.
//!
//! Needs root (network namespaces); without it the test prints why it is skipped and returns.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::thread;
use std::time::Duration;

use linkem::lab::{is_root, Lab, Offloads, HOST_B_ADDRESS};

const LINKEM: &str = env!("CARGO_BIN_EXE_linkem");
const PAYLOAD_BYTES: usize = 1 << 20;

#[test]
fn tcp_and_udp_cross_linkem_when_the_hosts_leave_tx_checksum_offload_on() {
    if !is_root() {
        eprintln!("SKIP tcp_and_udp_cross_linkem_when_the_hosts_leave_tx_checksum_offload_on: needs root");
        return;
    }
    let lab = Lab::create_with("lko", Offloads::TxChecksum).expect("create the namespace topology");
    let linkem = lab.start_linkem(Path::new(LINKEM), "delay=1ms", "delay=1ms", 1).expect("start linkem");

    let address = SocketAddr::from((HOST_B_ADDRESS, 5301));
    let listener = lab.host_b.run(|| TcpListener::bind(address)).expect("listen in host B");
    let payload: Vec<u8> = (0..PAYLOAD_BYTES).map(|i| (i % 251) as u8).collect();
    let receiving = thread::spawn(move || -> std::io::Result<Vec<u8>> {
        let (mut stream, _) = listener.accept()?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut received = Vec::new();
        stream.read_to_end(&mut received)?;
        stream.write_all(b"done")?;
        Ok(received)
    });
    let mut sender = lab
        .host_a
        .run(|| TcpStream::connect_timeout(&address, Duration::from_secs(3)))
        .expect("TCP connects through linkem although the hosts send partial checksums");
    sender.set_read_timeout(Some(Duration::from_secs(10))).expect("read timeout");
    sender.write_all(&payload).expect("send the payload");
    sender.shutdown(Shutdown::Write).expect("close the sending side");
    let mut reply = Vec::new();
    sender.read_to_end(&mut reply).expect("read the reply");
    let received = receiving.join().expect("receiver thread").expect("receive");
    assert!(received == payload, "host B received {} bytes, not the {PAYLOAD_BYTES} sent", received.len());
    assert_eq!(reply, b"done");

    let udp_target = SocketAddr::from((HOST_B_ADDRESS, 5302));
    let udp_receiver = lab.host_b.run(|| UdpSocket::bind(udp_target)).expect("bind UDP in host B");
    udp_receiver.set_read_timeout(Some(Duration::from_secs(2))).expect("read timeout");
    let udp_sender = lab.host_a.run(|| UdpSocket::bind("0.0.0.0:0")).expect("bind UDP in host A");
    udp_sender.send_to(b"datagram", udp_target).expect("send a datagram");
    let mut buffer = [0u8; 64];
    let length = udp_receiver.recv(&mut buffer).expect("the UDP datagram arrives");
    assert_eq!(&buffer[..length], b"datagram");

    let counters = linkem.counters().expect("counters");
    println!("offload: ab counters {}; ba counters {}", counters["ab"], counters["ba"]);
    let completed = |direction: &str| counters[direction]["checksum_completed"].as_u64().unwrap_or(0);
    // Host A sent the payload segments and the datagram; host B the SYN-ACK, the ACKs and the reply.
    assert!(completed("ab") >= (PAYLOAD_BYTES / 1500) as u64, "ab completed {}", completed("ab"));
    assert!(completed("ba") > 0, "ba completed {}", completed("ba"));

    let stderr = linkem.stop().expect("stop linkem");
    let warnings: Vec<&str> = stderr.lines().filter(|line| line.contains("partial TCP/UDP checksums")).collect();
    assert_eq!(warnings.len(), 2, "one warning per direction:\n{stderr}");
    println!("offload: linkem warned\n{}", warnings.join("\n"));
    for (warning, ingress) in warnings.iter().zip([&lab.link_interface_a, &lab.link_interface_b]) {
        assert!(
            warning.contains(&format!("`{ingress}`")) && warning.contains("`ethtool -K IFACE tx off`"),
            "{warning}"
        );
    }
    assert!(!stderr.contains("forwarded as it came"), "{stderr}");
}
