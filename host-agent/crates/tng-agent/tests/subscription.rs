//! The agent's subscription to the controller, with real processes: the Python controller (`tngctl serve`, no
//! switches), a `tng serve` and a `tng proxy` subscribed to it. A policy set with `tngctl` changes the live
//! connection's controllers and scheduler; a deleted one gives the agent's own settings back; a controller that goes
//! away leaves its policies in force and the connection working. Without a reachable controller the policy file
//! applies.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, keygen, wait_tcp, Process, TNG};
use serde_json::Value;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..").canonicalize().expect("repository root")
}

/// The repository's Python, if it has the controller package; otherwise why the test cannot run.
fn controller_python() -> Result<PathBuf, String> {
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

/// A directory under the temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!("tng-test-{}-{name}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    fn file(&self, name: &str, contents: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, contents).unwrap();
        path.to_str().unwrap().to_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `tngctl serve` with an empty store and no switches; returns it and the address it serves on.
fn start_controller(python: &Path, dir: &TempDir) -> (Child, String) {
    let store = dir.0.join("policies.db");
    let config = dir.file("controller.toml", &format!("[api]\nlisten = \"127.0.0.1:0\"\n[store]\npath = {store:?}\n"));
    let mut child = Command::new(python)
        .args(["-m", "tng_controller.tngctl", "serve", "--config", &config])
        .current_dir(repository())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tngctl serve");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = lines.next().and_then(Result::ok).unwrap_or_default();
    let address = ready
        .strip_prefix("tngctl: serving the policy API on ")
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_else(|| panic!("tngctl serve did not say where it serves: {ready:?}"))
        .to_owned();
    (child, address)
}

fn tngctl(python: &Path, controller: &str, args: &[&str]) {
    let out = Command::new(python)
        .args(["-m", "tng_controller.tngctl", "--server", controller])
        .args(args)
        .current_dir(repository())
        .output()
        .unwrap();
    assert!(out.status.success(), "tngctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A TCP echo server, the target the proxy reaches through tng.
fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut buffer = [0u8; 4096];
                while let Ok(n @ 1..) = stream.read(&mut buffer) {
                    if stream.write_all(&buffer[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// One exchange through the proxy: what goes in comes back.
fn echo_through(proxy: SocketAddr) {
    let mut stream = TcpStream::connect(proxy).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream.write_all(b"still there?").unwrap();
    let mut answer = [0u8; 12];
    stream.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"still there?");
}

/// The server and a proxy client, both started with `extra` flags; the server's flags come from a config file, as
/// every flag may.
struct Agents {
    _serve: Process,
    _proxy: Process,
    control: String,
    proxy: SocketAddr,
}

fn start_agents(dir: &TempDir, extra: &[(&str, &str)]) -> Agents {
    let (key, identity) = keygen(&format!("subscription-{}", free_port()));
    let server = format!("127.0.0.1:{}", free_port());
    let target = echo_server();
    let control = dir.0.join("tng.sock").to_str().unwrap().to_owned();
    let mut config = format!(
        "[serve]\nlisten = \"{server}\"\nidentity = \"{key}\"\nallow-proxy = \"{target}\"\ncontrol = \"{control}\"\n\
         cc = \"cubic\"\nscheduler = \"ack-clocked\"\n"
    );
    for (flag, value) in extra {
        config.push_str(&format!("{flag} = \"{value}\"\n"));
    }
    let config = dir.file("tng.toml", &config);
    let serve = Process::spawn(&["--config", &config, "serve"]);
    let proxy: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut args: Vec<String> = vec![
        "proxy".into(),
        "--server-identity".into(),
        identity,
        "--via".into(),
        server,
        "--listen".into(),
        proxy.to_string(),
        "--to".into(),
        target.to_string(),
    ];
    for (flag, value) in extra {
        args.extend([format!("--{flag}"), (*value).to_owned()]);
    }
    let proxy_process = Process::spawn(&args);
    wait_tcp(proxy);
    Agents { _serve: serve, _proxy: proxy_process, control, proxy }
}

fn status(control: &str) -> Value {
    let out = Command::new(TNG).args(["status", "--json", "--control", control]).output().unwrap();
    assert!(out.status.success(), "tng status: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Polls the server's status until its established connection satisfies `check`; returns that connection.
fn wait_for(control: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let view = status(control);
        let established = view["connections"].as_array().into_iter().flatten().find(|c| c["established"] == true);
        if let Some(connection) = established.filter(|c| check(c)) {
            return connection.clone();
        }
        assert!(Instant::now() < deadline, "{what}: never happened; last status {view:#}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn channel_controllers(connection: &Value) -> Vec<String> {
    let channels = connection["channels"].as_array().into_iter().flatten();
    channels.map(|ch| ch["congestion_control"].as_str().unwrap_or_default().to_owned()).collect()
}

fn governed_by(connection: &Value, name: &str, source: &str) -> bool {
    connection["policy"]["name"] == name && connection["policy"]["source"] == source
}

#[test]
fn agent_subscription_receives_a_policy_change() {
    let python = match controller_python() {
        Ok(python) => python,
        Err(reason) => {
            eprintln!("skipped: {reason}");
            return;
        }
    };
    let dir = TempDir::new("subscription");
    let (mut controller, address) = start_controller(&python, &dir);
    let agents = start_agents(&dir, &[("controller", &address)]);
    let before = wait_for(&agents.control, "a connection", |c| c["policy"].is_null());
    assert_eq!(before["scheduler"], "ack-clocked");
    assert!(channel_controllers(&before).iter().all(|cc| cc == "cubic"), "{before:#}");

    // Packets to the server's port: the server's side of the connection matches.
    let server_port = before["channels"][0]["local"].as_str().unwrap().rsplit(':').next().unwrap().to_owned();
    let policies = dir.file(
        "policies.toml",
        &format!(
            "[[policy]]\nname = \"agents\"\nmatch = {{ priority = 5, ip_protocol = 17, dst_port = {{ value = \
             {server_port}, mask = 65535 }} }}\nhost_policy = {{ congestion_control = \"vegas\", scheduler = \
             \"lowest-rtt\", tail_loss = \"alternate-path\", rate_cap_kbps = 100000 }}\n"
        ),
    );
    tngctl(&python, &address, &["policy", "set", &policies]);
    let governed = wait_for(&agents.control, "the controller's policy applies", |c| {
        governed_by(c, "agents", "controller") && c["scheduler"] == "lowest-rtt"
    });
    assert!(governed["policy"]["revision"].as_u64().unwrap() > 0, "{governed:#}");
    assert_eq!(governed["tail_loss"], "alternate-path");
    assert!(channel_controllers(&governed).iter().all(|cc| cc == "vegas"), "{governed:#}");
    echo_through(agents.proxy);

    // Deleted: back to the agent's own settings.
    tngctl(&python, &address, &["policy", "rm", "agents"]);
    let released = wait_for(&agents.control, "the deleted policy is released", |c| c["policy"].is_null());
    assert_eq!(released["scheduler"], "ack-clocked");
    assert!(channel_controllers(&released).iter().all(|cc| cc == "cubic"), "{released:#}");

    // The controller goes away: its policies stay in force and the connection keeps working.
    tngctl(&python, &address, &["policy", "set", &policies]);
    wait_for(&agents.control, "the policy applies again", |c| governed_by(c, "agents", "controller"));
    let _ = controller.kill();
    let _ = controller.wait();
    std::thread::sleep(Duration::from_secs(1));
    let after = wait_for(&agents.control, "the policy outlives the controller", |c| c["scheduler"] == "lowest-rtt");
    assert!(governed_by(&after, "agents", "controller"), "{after:#}");
    echo_through(agents.proxy);
}

#[test]
fn without_a_reachable_controller_the_policy_file_applies() {
    let dir = TempDir::new("policy-file");
    let policies = dir.file(
        "local.toml",
        "[[policy]]\nname = \"local\"\nhost_policy = { congestion_control = \"newreno\", scheduler = \"weighted\" }\n",
    );
    // Nothing listens on this port.
    let nowhere = format!("127.0.0.1:{}", free_port());
    let agents = start_agents(&dir, &[("controller", &nowhere), ("policy", &policies)]);
    let connection = wait_for(&agents.control, "the file's policy applies", |c| governed_by(c, "local", "file"));
    assert_eq!(connection["scheduler"], "weighted");
    assert!(channel_controllers(&connection).iter().all(|cc| cc == "newreno"), "{connection:#}");
    echo_through(agents.proxy);
}

#[test]
fn controller_flags_are_checked_before_anything_starts() {
    let out = Command::new(TNG)
        .args(["connect", "--server", "127.0.0.1:9", "--controller", "127.0.0.1", "--idle-timeout", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(stderr.trim(), "tng: error: --controller \"127.0.0.1\" is not HOST:PORT");
    let out =
        Command::new(TNG).args(["connect", "--server", "127.0.0.1:9", "--controller-ca", "ca.pem"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim(), "tng: error: --controller-ca, --controller-cert and --controller-key need --controller");
}
