//! The agent on real loopback sockets: bulk integrity through the proxy, failures reported cleanly, HTTP through the
//! proxy from an unmodified client.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{free_port, keygen, serve_allowing, wait_tcp, Process, ProxyServer, TNG};
use sha2::{Digest, Sha256};

/// A TCP server that hashes what each client sends and reports the digest and byte count of every connection that
/// carried data (the readiness probe of `wait_tcp` carries none).
fn hashing_sink() -> (SocketAddr, mpsc::Receiver<(Vec<u8>, u64)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let tx = tx.clone();
            std::thread::spawn(move || hash_connection(&mut stream, &tx));
        }
    });
    (addr, rx)
}

fn hash_connection(stream: &mut TcpStream, tx: &mpsc::Sender<(Vec<u8>, u64)>) {
    let mut hasher = Sha256::new();
    let mut total = 0u64;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                hasher.update(&buf[..n]);
                total += n as u64;
            }
        }
    }
    if total > 0 {
        let _ = tx.send((hasher.finalize().to_vec(), total));
    }
}

/// `tng serve` allowing `target`, and a `tng proxy` to it.
struct Proxied {
    server: ProxyServer,
    proxy: Process,
    /// The proxy's local address.
    listen: SocketAddr,
}

/// `extra` flags go to both (e.g. a shorter `--idle-timeout`).
fn serve_and_proxy(target: SocketAddr, extra: &[&str]) -> Proxied {
    let server = serve_allowing(target, "server", extra);
    let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut args: Vec<String> =
        ["proxy", "--listen", &listen.to_string(), "--via", &server.address, "--to", &target.to_string()]
            .iter()
            .map(ToString::to_string)
            .collect();
    args.extend(["--server-identity".to_string(), server.identity.clone()]);
    args.extend(extra.iter().map(ToString::to_string));
    let proxy = Process::spawn(&args);
    wait_tcp(listen);
    Proxied { server, proxy, listen }
}

/// Sends `bytes` of a pattern drawn from `seed` through the proxy at `listen`; the SHA-256 of what was sent, or the
/// error that cut the connection.
fn send_through(listen: SocketAddr, bytes: usize, seed: u8) -> std::io::Result<Vec<u8>> {
    let data: Vec<u8> = (0..bytes).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
    let mut stream = TcpStream::connect(listen)?;
    stream.write_all(&data)?;
    stream.shutdown(std::net::Shutdown::Write)?;
    Ok(Sha256::digest(&data).to_vec())
}

#[test]
fn hundred_megabytes_through_the_proxy_arrive_intact() {
    let (sink, digest) = hashing_sink();
    let proxied = serve_and_proxy(sink, &[]);
    let mut stream = TcpStream::connect(proxied.listen).unwrap();
    let mut hasher = Sha256::new();
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut chunk = vec![0u8; 1 << 20];
    let started = Instant::now();
    for _ in 0..100 {
        for b in chunk.iter_mut() {
            // xorshift: cheap bytes that are not a repeating pattern
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *b = state as u8;
        }
        hasher.update(&chunk);
        stream.write_all(&chunk).unwrap();
    }
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    let (received, bytes) = digest.recv_timeout(Duration::from_secs(300)).expect("sink finished");
    let seconds = started.elapsed().as_secs_f64();
    eprintln!("100 MiB through tng proxy in {seconds:.2} s = {:.0} Mbit/s", 800.0 * 1.048576 / seconds);
    assert_eq!(bytes, 100 << 20);
    assert_eq!(received, hasher.finalize().to_vec(), "SHA-256 of delivered bytes differs");
}

#[test]
fn proxy_connects_again_after_its_server_restarts() {
    let (sink, digests) = hashing_sink();
    let mut proxied = serve_and_proxy(sink, &["--idle-timeout", "2"]);
    let sent = send_through(proxied.listen, 1 << 20, 0).unwrap();
    assert_eq!(digests.recv_timeout(Duration::from_secs(30)).expect("first transfer"), (sent, 1 << 20));
    proxied.server.restart();
    // The new server knows nothing of the proxy's connection: it times out after 2 s without an answer, and a
    // client after that gets a stream on a new connection. Clients before that fail; none may get a wrong byte.
    let deadline = Instant::now() + Duration::from_secs(40);
    for attempt in 1u8.. {
        assert!(Instant::now() < deadline, "no transfer through the proxy went through after the server restarted");
        if let Ok(sent) = send_through(proxied.listen, 1 << 20, attempt) {
            if let Ok(received) = digests.recv_timeout(Duration::from_secs(5)) {
                assert_eq!(received, (sent, 1 << 20), "attempt {attempt} delivered other bytes than it sent");
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn proxy_resets_its_client_when_the_server_dies_mid_download() {
    // A target that sends until its reader goes away: the download has no end of its own.
    let source = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = source.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut stream in source.incoming().flatten() {
            std::thread::spawn(move || while stream.write_all(&[7u8; 1 << 16]).is_ok() {});
        }
    });
    let mut proxied = serve_and_proxy(target, &["--idle-timeout", "2"]);
    let mut client = TcpStream::connect(proxied.listen).unwrap();
    client.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut buf = vec![0u8; 1 << 16];
    let mut received = 0;
    while received < 1 << 20 {
        received += client.read(&mut buf).expect("the download flows");
    }
    proxied.server.process.kill();
    // The proxy's stream fails once its connection times out: its client must see that as an error, never as the
    // clean end of a download.
    loop {
        match client.read(&mut buf) {
            Ok(0) => panic!("the proxy closed its client cleanly after {received} bytes of a download cut short"),
            Ok(n) => received += n,
            Err(err) => {
                assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset, "{err}");
                break;
            }
        }
    }
}

#[test]
fn server_resets_its_target_when_the_proxy_dies_mid_upload() {
    // A target that reads until the end, says when the upload's first bytes arrived and how the upload ended.
    let sink = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = sink.local_addr().unwrap();
    let (tx, ended) = mpsc::channel();
    let (first_bytes, arrived) = mpsc::channel();
    std::thread::spawn(move || {
        for mut stream in sink.incoming().flatten() {
            let (tx, first_bytes) = (tx.clone(), first_bytes.clone());
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 1 << 16];
                let mut total = 0;
                let end = loop {
                    match stream.read(&mut buf) {
                        Ok(0) => break Ok(total),
                        Ok(n) => {
                            if total == 0 {
                                let _ = first_bytes.send(());
                            }
                            total += n;
                        }
                        Err(err) => break Err(err.kind()),
                    }
                };
                if total > 0 {
                    let _ = tx.send(end);
                }
            });
        }
    });
    let mut proxied = serve_and_proxy(target, &["--idle-timeout", "2"]);
    let mut client = TcpStream::connect(proxied.listen).unwrap();
    client.write_all(&vec![5u8; 1 << 20]).unwrap();
    // Killed mid-upload: once the target has some of it (a fixed wait cut some loaded runs before any byte).
    arrived.recv_timeout(Duration::from_secs(30)).expect("the upload reached the target");
    proxied.proxy.kill();
    // The server's stream fails once its connection times out: the target must see that as an error, never as the
    // clean end of an upload.
    let end = ended.recv_timeout(Duration::from_secs(30)).expect("the target's connection ended");
    assert_eq!(end, Err(std::io::ErrorKind::ConnectionReset), "the upload was cut short, not finished");
}

#[test]
fn client_reports_a_clean_error_when_the_server_dies() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut server = Process::spawn(&["perf", "server", "--listen", &addr]);
    wait_tcp(addr.parse().unwrap());
    let client = Command::new(TNG)
        .args(["perf", "client", "--connect", &addr, "--duration", "30", "--json", "--idle-timeout", "3"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let killed = Instant::now();
    server.kill();
    let out = client.wait_with_output().unwrap();
    let waited = killed.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "client should fail once the server is gone");
    assert!(waited < Duration::from_secs(10), "client took {waited:?} to notice");
    let last = stderr.trim().lines().last().unwrap_or_default();
    assert!(last.starts_with("tng: error:"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn proxy_carries_an_http_exchange_from_an_unmodified_client() {
    // A one-shot HTTP server that answers every request with a fixed body.
    let http = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = http.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in http.incoming().flatten() {
            let mut stream = stream;
            let mut request = [0u8; 4096];
            let n = stream.read(&mut request).unwrap_or(0);
            let ok = String::from_utf8_lossy(&request[..n]).starts_with("GET /hello");
            let body = if ok { "hello through tng\n" } else { "bad request\n" };
            let reply = format!("HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len());
            let _ = stream.write_all(reply.as_bytes());
        }
    });
    let proxied = serve_and_proxy(target, &[]);
    let url = format!("http://{}/hello", proxied.listen);
    let out = Command::new("python3")
        .args(["-c", "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=20).read().decode(), end='')", &url])
        .output()
        .expect("python3 runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello through tng\n");
    // The server sent the response: its status tells how long those bytes waited before leaving.
    let status =
        Command::new(TNG).args(["status", "--json", "--control"]).arg(&proxied.server.control).output().unwrap();
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).expect("status JSON");
    let connection = &status["connections"][0];
    let (p50, p95) = (connection["sender_queueing_p50_ms"].as_f64(), connection["sender_queueing_p95_ms"].as_f64());
    assert!(p50.zip(p95).is_some_and(|(p50, p95)| 0.0 <= p50 && p50 <= p95), "{status:#}");
    assert!(connection["unsent_limit"].as_u64().is_some_and(|limit| limit > 0), "{status:#}");
}

#[test]
fn proxy_refuses_targets_the_server_does_not_allow() {
    // A listening target the server was not told to allow.
    let forbidden = TcpListener::bind("127.0.0.1:0").unwrap();
    let other = forbidden.local_addr().unwrap();
    let (key, _) = keygen("other");
    let server = format!("127.0.0.1:{}", free_port());
    let _serve2 =
        Process::spawn(&["serve", "--listen", &server, "--identity", &key, "--control", "/tmp/tng-test-refuse.sock"]);
    let listen2 = format!("127.0.0.1:{}", free_port());
    let _proxy2 = Process::spawn(&["proxy", "--listen", &listen2, "--via", &server, "--to", &other.to_string()]);
    wait_tcp(listen2.parse().unwrap());
    let mut stream = TcpStream::connect(&listen2).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = stream.write_all(b"ping");
    let mut buf = [0u8; 16];
    // The server closes the stream instead of connecting: the client sees EOF, never data.
    assert!(matches!(stream.read(&mut buf), Ok(0) | Err(_)));
}

#[test]
fn wrong_server_identity_fails_with_one_clear_line() {
    let (key, _) = keygen("pinned");
    let (_, other_identity) = keygen("impostor");
    let server = format!("127.0.0.1:{}", free_port());
    let _serve =
        Process::spawn(&["serve", "--listen", &server, "--identity", &key, "--control", "/tmp/tng-test-pin.sock"]);
    std::thread::sleep(Duration::from_millis(300));
    let out = Command::new(TNG)
        .args(["connect", "--server", &server, "--server-identity", &other_identity])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("does not match") && stderr.contains(&other_identity), "{stderr}");
}

#[test]
fn bad_key_file_and_unreachable_server_are_clear_errors() {
    let bad = std::env::temp_dir().join(format!("tng-test-{}-bad.key", std::process::id()));
    std::fs::write(&bad, "garbage").unwrap();
    let out = Command::new(TNG)
        .args(["serve", "--listen", "127.0.0.1:0", "--identity", bad.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("is not a tng key file"), "{stderr}");

    let port = free_port();
    let started = Instant::now();
    let out = Command::new(TNG).args(["connect", "--server", &format!("127.0.0.1:{port}")]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.starts_with("tng: error:") && stderr.trim().lines().count() == 1, "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(20));
}
