//! Helpers shared by the agent's end-to-end tests: free ports and child processes that die with the test.

#![allow(dead_code)] // each test binary uses a different subset

pub mod flood;
pub mod netns;

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

pub const TNG: &str = env!("CARGO_BIN_EXE_tng");

/// A port free for both TCP and UDP on 127.0.0.1.
///
/// Ports come from a per-process block below the kernel's ephemeral range, so that a port handed to a child process
/// is not handed out again by the kernel (to a concurrent test) before the child binds it.
pub fn free_port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = 12_000 + (std::process::id() % 1_800) as u16 * 10;
    loop {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % 10;
        let port = base + offset;
        let tcp = TcpListener::bind(("127.0.0.1", port));
        let udp = UdpSocket::bind(("127.0.0.1", port));
        if tcp.is_ok() && udp.is_ok() {
            return port;
        }
        if offset == 9 {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A child process killed when dropped.
pub struct Process(pub Child);

impl Process {
    pub fn spawn<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Process {
        Process(Command::new(TNG).args(args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("spawn tng"))
    }

    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits until a TCP port accepts connections.
pub fn wait_tcp(addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {addr}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A key file in the temp directory, made with `tng keygen`; returns (path, identity).
pub fn keygen(name: &str) -> (String, String) {
    let path = std::env::temp_dir().join(format!("tng-test-{}-{name}.key", std::process::id()));
    let out = Command::new(TNG).args(["keygen", "--force", "--out", path.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (path.to_str().unwrap().to_owned(), String::from_utf8(out.stdout).unwrap().trim().to_owned())
}

/// The repository's root.
pub fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..").canonicalize().expect("repository root")
}

/// The repository's Python, if it has the controller package; otherwise why the test cannot run.
pub fn controller_python() -> Result<PathBuf, String> {
    let python = repository().join(".venv/bin/python");
    if !python.exists() {
        return Err(format!("{} is absent (make deps creates it)", python.display()));
    }
    let imports = Command::new(&python)
        .args(["-c", "import tng_controller.tngctl"])
        .current_dir(repository())
        .stderr(Stdio::null())
        .status()
        .map_err(|err| format!("cannot run {}: {err}", python.display()))?;
    if !imports.success() {
        return Err(format!("the controller package tng_controller is not importable by {}", python.display()));
    }
    Ok(python)
}

/// `tngctl serve --config config` run by `python` (inside network namespace `namespace` if given); returns once its
/// ready line says where it serves, with that address.
pub fn tngctl_serve(python: &Path, config: &Path, namespace: Option<&str>) -> (Process, String) {
    let mut command = match namespace {
        Some(ns) => {
            let mut command = Command::new("ip");
            command.args(["netns", "exec", ns]).arg(python);
            command
        }
        None => Command::new(python),
    };
    let mut child = command
        .args(["-m", "tng_controller.tngctl", "serve", "--config"])
        .arg(config)
        .current_dir(repository())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tngctl serve");
    let ready = BufReader::new(child.stdout.take().unwrap()).lines().next().and_then(Result::ok).unwrap_or_default();
    let address = ready
        .strip_prefix("tngctl: serving the policy API on ")
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_else(|| panic!("tngctl serve did not say where it serves: {ready:?}"))
        .to_owned();
    (Process(child), address)
}

/// A `tng serve` that allows proxy streams to one target, with its identity and control socket.
pub struct ProxyServer {
    pub process: Process,
    /// Where it listens, HOST:PORT.
    pub address: String,
    /// Its public identity, for `--server-identity`.
    pub identity: String,
    /// Its control socket, for `tng status`.
    pub control: PathBuf,
    argv: Vec<String>,
}

impl ProxyServer {
    /// Kills the server and starts a new one with the same key, address and target: it knows none of the old
    /// server's connections.
    pub fn restart(&mut self) {
        self.process.kill();
        self.process = Process::spawn(&self.argv);
    }
}

/// `tng serve` on a free port with a new key, allowing `tng proxy` streams to `target`; `name` tells its files apart,
/// `extra` are more of its flags.
pub fn serve_allowing(target: SocketAddr, name: &str, extra: &[&str]) -> ProxyServer {
    // Tests of one binary run at once: each server gets files of its own.
    static SERVERS: AtomicU16 = AtomicU16::new(0);
    let name = format!("{name}-{}", SERVERS.fetch_add(1, Ordering::Relaxed));
    let (key, identity) = keygen(&name);
    let address = format!("127.0.0.1:{}", free_port());
    let control = std::env::temp_dir().join(format!("tng-test-{}-{name}.sock", std::process::id()));
    let argv: Vec<String> = [
        "serve",
        "--listen",
        &address,
        "--identity",
        &key,
        "--allow-proxy",
        &target.to_string(),
        "--control",
        control.to_str().unwrap(),
    ]
    .iter()
    .chain(extra)
    .map(ToString::to_string)
    .collect();
    let process = Process::spawn(&argv);
    ProxyServer { process, address, identity, control, argv }
}
