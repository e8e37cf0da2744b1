//! `tng proxy --alcc`: an unmodified TCP client downloads through the proxy, whose writes to it run under a tng
//! controller fed from the client socket's TCP_INFO (loopback), and bad `--alcc` values are refused up front.

mod common;

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{free_port, serve_allowing, wait_tcp, Process, TNG};
use sha2::{Digest, Sha256};

const DOWNLOAD: usize = 8 << 20;
const UPLOAD: usize = 256 << 10;

/// Bytes that do not repeat (xorshift), the same for a given seed.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// A TCP target that sends `download` to each client that sends anything, and reports the SHA-256 and length of
/// what that client sent (the readiness probe of `wait_tcp` sends nothing and gets nothing).
fn download_server(download: Vec<u8>) -> (SocketAddr, mpsc::Receiver<(Vec<u8>, usize)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let (tx, download) = (tx.clone(), download.clone());
            std::thread::spawn(move || {
                let mut first = [0u8; 1];
                if !matches!(stream.read(&mut first), Ok(1)) {
                    return;
                }
                let mut writer = stream.try_clone().unwrap();
                let sender = std::thread::spawn(move || {
                    let _ = writer.write_all(&download);
                    let _ = writer.shutdown(std::net::Shutdown::Write);
                });
                let mut uploaded = first.to_vec();
                let _ = stream.read_to_end(&mut uploaded);
                let _ = sender.join();
                let _ = tx.send((Sha256::digest(&uploaded).to_vec(), uploaded.len()));
            });
        }
    });
    (addr, rx)
}

/// The numbers of the proxy's ALCC line about client `peer`: (bytes down, peak window, most bytes the kernel held,
/// TCP_INFO reads, timed round trips). (`wait_tcp`'s probe gets a line of its own.)
fn alcc_line(log: &str, peer: SocketAddr, controller: &str) -> Option<(u64, u64, u64, u64, u64)> {
    let line = log.lines().find(|line| {
        line.contains(&format!("{peer}: ")) && line.contains(&format!("alcc {controller}: window peaked"))
    })?;
    let numbers: Vec<u64> =
        line.split(|c: char| !c.is_ascii_digit()).filter_map(|word| word.parse().ok()).collect::<Vec<_>>();
    // 127.0.0.1:PORT comes first: 127, 0, 0, 1, port; then down, up, window, kernel bytes, reads, round trips.
    match numbers[5..] {
        [down, _up, window, kernel, reads, round_trips] => Some((down, window, kernel, reads, round_trips)),
        _ => panic!("unexpected ALCC line: {line}"),
    }
}

#[test]
fn a_download_through_the_proxy_under_alcc_copa_arrives_intact_and_reports_the_controller() {
    let download = pattern(0x9E37_79B9_7F4A_7C15, DOWNLOAD);
    let upload = pattern(0x2545_F491_4F6C_DD1D, UPLOAD);
    let (target, uploads) = download_server(download.clone());
    let server = serve_allowing(target, "proxy-alcc", &[]);
    let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let log_path = std::env::temp_dir().join(format!("tng-test-{}-proxy-alcc.log", std::process::id()));
    let log = File::create(&log_path).unwrap();
    let _proxy = Process(
        Command::new(TNG)
            .args(["proxy", "--listen", &listen.to_string(), "--via", &server.address, "--to", &target.to_string()])
            .args(["--server-identity", &server.identity, "--alcc", "copa"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    wait_tcp(listen);

    let mut client = TcpStream::connect(listen).unwrap();
    let peer = client.local_addr().unwrap();
    client.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    client.write_all(&upload).unwrap();
    client.shutdown(std::net::Shutdown::Write).unwrap();
    let started = Instant::now();
    let mut received = Vec::new();
    client.read_to_end(&mut received).unwrap();
    let seconds = started.elapsed().as_secs_f64();
    eprintln!("{} bytes down through tng proxy --alcc copa in {seconds:.2} s", received.len());
    assert_eq!(received.len(), DOWNLOAD);
    assert_eq!(Sha256::digest(&received), Sha256::digest(&download), "SHA-256 of the download differs");
    let (uploaded_hash, uploaded_len) =
        uploads.recv_timeout(Duration::from_secs(30)).expect("the target saw the upload");
    assert_eq!(uploaded_len, UPLOAD);
    assert_eq!(uploaded_hash, Sha256::digest(&upload).to_vec(), "SHA-256 of the upload differs");

    // The proxy prints its line once both directions ended.
    let deadline = Instant::now() + Duration::from_secs(15);
    let (down, window, kernel, reads, round_trips) = loop {
        let text = std::fs::read_to_string(&log_path).unwrap();
        if let Some(numbers) = alcc_line(&text, peer, "copa") {
            eprintln!("{}", text.trim());
            break numbers;
        }
        assert!(Instant::now() < deadline, "no ALCC line from the proxy: {text}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(down, DOWNLOAD as u64);
    assert!(reads > 0, "the proxy read TCP_INFO as it wrote");
    assert!(round_trips > 0, "the proxy timed round trips from the kernel's byte counters");
    // The allowance is whole segments: the kernel holds less than one beyond the window (loopback's are < 64 KiB).
    assert!(kernel > 0 && kernel < window + 65_536, "the kernel held {kernel} bytes, the window peaked at {window}");
    let _ = std::fs::remove_file(&log_path);
}

#[test]
fn the_proxy_refuses_controllers_alcc_cannot_run_before_connecting() {
    // Nothing listens at --via: the refusal must come before any connection attempt.
    let via = format!("127.0.0.1:{}", free_port());
    let listen = format!("127.0.0.1:{}", free_port());
    for (alcc, reason) in [
        ("sprout", "sprout needs forecasts from the receiving application"),
        ("cubic", "cubic is not one of the delay-based controllers ALCC runs over kernel TCP (copa, verus, sprout)"),
    ] {
        let out = Command::new(TNG)
            .args(["proxy", "--listen", &listen, "--via", &via, "--to", "127.0.0.1:9", "--alcc", alcc])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{alcc}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with("tng: error: --alcc: ") && stderr.contains(reason), "{stderr}");
    }
}
