//! `tng proxy --alcc copa|verus` on a real bottleneck: a plain TCP client in one namespace downloads through the
//! proxy in the other, whose writes to it leave through a 10 Mbit/s drop-tail queue (tbf), the system's default
//! kernel controller underneath. The tng server and the target sit beside the proxy on loopback. Needs root; skipped
//! otherwise.
mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::netns::{is_root, tbf, TwoPaths};
use common::{Process, TNG};

const DOWNLOAD: usize = 4 << 20;

/// Python: serves `DOWNLOAD` seeded random bytes to every client on 127.0.0.1:7000 after printing their SHA-256.
const TARGET: &str = "import hashlib, random, socket, sys
data = random.Random(7).randbytes(int(sys.argv[1]))
print(hashlib.sha256(data).hexdigest(), flush=True)
server = socket.create_server(('127.0.0.1', 7000))
while True:
    conn, _ = server.accept()
    conn.sendall(data)
    conn.close()
";

/// Python: downloads everything from argv[1]:argv[2] (retrying while nothing listens yet), prints its local port, the
/// length and the SHA-256.
const CLIENT: &str = "import hashlib, socket, sys, time
for _ in range(100):
    try:
        conn = socket.create_connection((sys.argv[1], int(sys.argv[2])))
        break
    except OSError:
        time.sleep(0.1)
conn.shutdown(socket.SHUT_WR)
data = bytearray()
while chunk := conn.recv(1 << 16):
    data += chunk
print(conn.getsockname()[1], len(data), hashlib.sha256(data).hexdigest())
";

fn spawn_in(ns: &str, program: &str, args: &[&str], stdout: Stdio, stderr: Stdio) -> std::process::Child {
    Command::new("ip").args(["netns", "exec", ns, program]).args(args).stdout(stdout).stderr(stderr).spawn().unwrap()
}

#[test]
fn downloads_through_the_proxy_under_alcc_copa_and_verus_cross_a_tbf_bottleneck_intact() {
    if !is_root() {
        eprintln!("SKIP proxy alcc netns: needs root for network namespaces");
        return;
    }
    let net = TwoPaths::new("pxa");
    tbf(&net.server, "s0", "10mbit", "100ms");
    let s = &net.server;
    let mut target = spawn_in(s, "python3", &["-c", TARGET, &DOWNLOAD.to_string()], Stdio::piped(), Stdio::null());
    let mut expected = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(target.stdout.take().unwrap()), &mut expected).unwrap();
    let _target = Process(target);
    let key = std::env::temp_dir().join(format!("tng-test-{}-pxa.key", std::process::id()));
    let keygen = Command::new(TNG).args(["keygen", "--force", "--out", key.to_str().unwrap()]).output().unwrap();
    assert!(keygen.status.success());
    let control = std::env::temp_dir().join(format!("tng-test-{}-pxa.sock", std::process::id()));
    let _serve = Process(spawn_in(
        s,
        TNG,
        &["serve", "--listen", "127.0.0.1:4477", "--identity", key.to_str().unwrap()]
            .into_iter()
            .chain(["--allow-proxy", "127.0.0.1:7000", "--control", control.to_str().unwrap()])
            .collect::<Vec<_>>(),
        Stdio::null(),
        Stdio::null(),
    ));
    std::thread::sleep(Duration::from_millis(300));
    for (alcc, listen) in [("copa", "8080"), ("verus", "8081")] {
        let report = download_through_proxy(&net, alcc, listen, expected.trim());
        let numbers: Vec<u64> = report.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect();
        // 10.77.0.1:PORT, then down, up, window, kernel bytes, reads, round trips.
        let [down, _up, window, kernel, reads, round_trips] = numbers[5..] else {
            panic!("unexpected ALCC line: {report}")
        };
        assert_eq!(down, DOWNLOAD as u64);
        assert!(reads > 10, "the proxy read TCP_INFO as it wrote: {report}");
        assert!(round_trips > 10, "the proxy timed round trips from the kernel's byte counters: {report}");
        // The allowance is whole segments: the kernel holds less than one (1448 bytes here) beyond the window.
        assert!(kernel > 0 && kernel < window + 1448, "the kernel held more than the window: {report}");
    }
    let _ = std::fs::remove_file(&key);
    let _ = std::fs::remove_file(&control);
}

/// Starts `tng proxy --alcc {alcc}` on 10.77.0.2:`listen` in the server namespace, downloads through it from the
/// client namespace, checks the bytes against the `expected` SHA-256, and returns the proxy's ALCC line about it.
fn download_through_proxy(net: &TwoPaths, alcc: &str, listen: &str, expected: &str) -> String {
    let log_path = std::env::temp_dir().join(format!("tng-test-{}-pxa-{alcc}.log", std::process::id()));
    let _proxy = Process(spawn_in(
        &net.server,
        TNG,
        &["proxy", "--listen", &format!("10.77.0.2:{listen}"), "--via", "127.0.0.1:4477", "--to", "127.0.0.1:7000"]
            .into_iter()
            .chain(["--alcc", alcc])
            .collect::<Vec<_>>(),
        Stdio::null(),
        Stdio::from(std::fs::File::create(&log_path).unwrap()),
    ));
    let started = Instant::now();
    let client = spawn_in(&net.client, "python3", &["-c", CLIENT, "10.77.0.2", listen], Stdio::piped(), Stdio::piped());
    let out = client.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let seconds = started.elapsed().as_secs_f64();
    let line = String::from_utf8(out.stdout).unwrap();
    let [port, len, hash] = line.split_whitespace().collect::<Vec<_>>()[..] else { panic!("client printed {line}") };
    eprintln!("{alcc}: {len} bytes down through a 10 Mbit/s tbf in {seconds:.2} s (with connecting)");
    assert_eq!(len, DOWNLOAD.to_string(), "{alcc}");
    assert_eq!(hash, expected, "{alcc}: SHA-256 of the download differs");

    let deadline = Instant::now() + Duration::from_secs(15);
    let report = loop {
        let log = std::fs::read_to_string(&log_path).unwrap();
        let about = |l: &&str| l.contains(&format!("10.77.0.1:{port}: ")) && l.contains(&format!("alcc {alcc}:"));
        if let Some(report) = log.lines().find(about) {
            break report.to_owned();
        }
        assert!(Instant::now() < deadline, "no ALCC line from the proxy: {log}");
        std::thread::sleep(Duration::from_millis(50));
    };
    eprintln!("{report}");
    let _ = std::fs::remove_file(&log_path);
    report
}
