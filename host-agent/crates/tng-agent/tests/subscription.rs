//! The agent's subscription to the controller, with real processes: the Python controller (`tngctl serve`, no
//! switches), a `tng serve` and a `tng proxy` subscribed to it. A policy set with `tngctl` changes the live
//! connection's controllers and scheduler; a deleted one gives the agent's own settings back; a controller that goes
//! away leaves its policies in force and the connection working. Without a reachable controller the policy file
//! applies. Over TLS with client certificates (made in the test), only agents with the controller's CA and a
//! certificate it trusts receive policies; the others log why and keep their own settings.

mod common;

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{controller_python, free_port, keygen, repository, tngctl_serve, wait_tcp, Process, TNG};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use serde_json::Value;

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

/// `tngctl serve` with an empty store, no switches and `api` added to its `[api]` table; returns it and the address
/// it serves on.
fn start_controller(python: &Path, dir: &TempDir, api: &str) -> (Process, String) {
    let store = dir.0.join("policies.db");
    let config =
        dir.file("controller.toml", &format!("[api]\nlisten = \"127.0.0.1:0\"\n{api}[store]\npath = {store:?}\n"));
    tngctl_serve(python, Path::new(&config), None)
}

/// `tngctl` with its global `options` (`--server`, TLS files) and a command's `args`.
fn tngctl(python: &Path, options: &[&str], args: &[&str]) {
    let out = Command::new(python)
        .args(["-m", "tng_controller.tngctl"])
        .args(options)
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

/// A certificate authority made by the test, and the PEM file of its certificate.
struct Authority {
    issuer: Issuer<'static, KeyPair>,
    ca: String,
}

impl Authority {
    fn new(dir: &TempDir, name: &str) -> Authority {
        let mut params = CertificateParams::new(Vec::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, format!("tng test CA {name}"));
        let key = KeyPair::generate().unwrap();
        let ca = dir.file(&format!("{name}.pem"), &params.self_signed(&key).unwrap().pem());
        Authority { issuer: Issuer::new(params, key), ca }
    }

    /// A certificate for `names` (IP addresses or DNS names; none for a client) with a new key; returns the PEM
    /// files of both.
    fn sign(&self, dir: &TempDir, name: &str, names: &[&str]) -> (String, String) {
        let mut params = CertificateParams::new(names.iter().map(|san| san.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (dir.file(&format!("{name}.pem"), &cert.pem()), dir.file(&format!("{name}.key"), &key.serialize_pem()))
    }
}

/// The server and a proxy client, both started with `extra` flags; the server's flags come from a config file, as
/// every flag may. The server logs into `log`.
struct Agents {
    _serve: Process,
    _proxy: Process,
    control: String,
    proxy: SocketAddr,
    log: PathBuf,
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
    let log = dir.0.join("serve.log");
    let serve = Command::new(TNG)
        .args(["--config", &config, "serve"])
        .stdout(Stdio::null())
        .stderr(File::create(&log).unwrap())
        .spawn()
        .expect("spawn tng serve");
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
    Agents { _serve: Process(serve), _proxy: proxy_process, control, proxy, log }
}

/// Waits until the server's log has a line containing `text`; returns that line.
fn wait_for_log(agents: &Agents, text: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let log = std::fs::read_to_string(&agents.log).unwrap();
        if let Some(line) = log.lines().find(|line| line.contains(text)) {
            return line.to_owned();
        }
        assert!(Instant::now() < deadline, "no log line with {text:?}; the log:\n{log}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The server's status, or why `tng status` failed (the daemon may still be starting: the proxy listens before it has
/// reached the server).
fn status(control: &str) -> Result<Value, String> {
    let out = Command::new(TNG).args(["status", "--json", "--control", control]).output().unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(serde_json::from_slice(&out.stdout).unwrap())
}

/// Polls the server's status until its established connection satisfies `check`; returns that connection.
fn wait_for(control: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let view = status(control);
        let connections = view.as_ref().ok().and_then(|view| view["connections"].as_array());
        let established = connections.into_iter().flatten().find(|c| c["established"] == true);
        if let Some(connection) = established.filter(|c| check(c)) {
            return connection.clone();
        }
        assert!(Instant::now() < deadline, "{what}: never happened; last status {view:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Polls the server's status until its controller subscription satisfies `check`; returns the subscription.
fn controller_status(control: &str, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let view = status(control);
        if let Some(controller) = view.as_ref().ok().map(|view| &view["controller"]).filter(|c| check(c)) {
            return controller.clone();
        }
        assert!(Instant::now() < deadline, "the subscription never got there; last status {view:#?}");
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
    let (mut controller, address) = start_controller(&python, &dir, "");
    let agents = start_agents(&dir, &[("controller", &address)]);
    let before = wait_for(&agents.control, "a connection", |c| c["policy"].is_null());
    let subscribed = controller_status(&agents.control, |c| c["state"] == "subscribed");
    assert_eq!((&subscribed["address"], &subscribed["policies"]), (&Value::from(address.as_str()), &Value::from(0)));
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
    tngctl(&python, &["--server", &address], &["policy", "set", &policies]);
    let governed = wait_for(&agents.control, "the controller's policy applies", |c| {
        governed_by(c, "agents", "controller") && c["scheduler"] == "lowest-rtt"
    });
    assert!(governed["policy"]["revision"].as_u64().unwrap() > 0, "{governed:#}");
    assert_eq!(governed["tail_loss"], "alternate-path");
    assert!(channel_controllers(&governed).iter().all(|cc| cc == "vegas"), "{governed:#}");
    controller_status(&agents.control, |c| c["policies"] == 1);
    echo_through(agents.proxy);

    // Deleted: back to the agent's own settings.
    tngctl(&python, &["--server", &address], &["policy", "rm", "agents"]);
    let released = wait_for(&agents.control, "the deleted policy is released", |c| c["policy"].is_null());
    assert_eq!(released["scheduler"], "ack-clocked");
    assert!(channel_controllers(&released).iter().all(|cc| cc == "cubic"), "{released:#}");

    // The controller goes away: its policies stay in force and the connection keeps working.
    tngctl(&python, &["--server", &address], &["policy", "set", &policies]);
    wait_for(&agents.control, "the policy applies again", |c| governed_by(c, "agents", "controller"));
    controller.kill();
    std::thread::sleep(Duration::from_secs(1));
    let after = wait_for(&agents.control, "the policy outlives the controller", |c| c["scheduler"] == "lowest-rtt");
    assert!(governed_by(&after, "agents", "controller"), "{after:#}");
    let lost = controller_status(&agents.control, |c| c["state"] == "lost");
    assert_eq!((&lost["policies"], &lost["subscriptions"]), (&Value::from(1), &Value::from(1)), "{lost:#}");
    assert!(lost["last_error"].is_string(), "{lost:#}");
    echo_through(agents.proxy);
}

#[test]
fn an_agent_given_replicas_moves_to_the_next_when_its_controller_goes_away() {
    let python = match controller_python() {
        Ok(python) => python,
        Err(reason) => {
            eprintln!("skipped: {reason}");
            return;
        }
    };
    // Two controllers with stores of their own stand in for replicas: which one serves shows in the policy.
    let (dir_a, dir_b) = (TempDir::new("replica-a"), TempDir::new("replica-b"));
    let (mut first, first_address) = start_controller(&python, &dir_a, "");
    let (_second, second_address) = start_controller(&python, &dir_b, "");
    for (dir, address, scheduler) in [(&dir_a, &first_address, "lowest-rtt"), (&dir_b, &second_address, "weighted")] {
        let policies = dir.file(
            "policies.toml",
            &format!("[[policy]]\nname = \"{scheduler}\"\nmatch = {{ priority = 5 }}\nhost_policy = {{ scheduler = \"{scheduler}\" }}\n"),
        );
        tngctl(&python, &["--server", address], &["policy", "set", &policies]);
    }
    let nowhere = format!("127.0.0.1:{}", free_port());
    let replicas = format!("{nowhere},{first_address},{second_address}");
    let agents = start_agents(&dir_a, &[("controller", &replicas)]);
    wait_for(&agents.control, "the first answering replica's policy", |c| governed_by(c, "lowest-rtt", "controller"));
    let subscribed = controller_status(&agents.control, |c| c["state"] == "subscribed");
    assert_eq!(subscribed["address"], first_address.as_str(), "{subscribed:#}");

    first.kill();
    let moved = wait_for(&agents.control, "the next replica's policy", |c| governed_by(c, "weighted", "controller"));
    assert_eq!(moved["scheduler"], "weighted");
    let subscribed = controller_status(&agents.control, |c| c["address"] == second_address.as_str());
    assert_eq!((&subscribed["state"], &subscribed["subscriptions"]), (&Value::from("subscribed"), &Value::from(2)));
    echo_through(agents.proxy);
}

#[test]
fn a_tls_controller_serves_only_agents_with_its_ca_and_a_certificate_it_trusts() {
    let python = match controller_python() {
        Ok(python) => python,
        Err(reason) => {
            eprintln!("skipped: {reason}");
            return;
        }
    };
    let dir = TempDir::new("tls");
    let ca = Authority::new(&dir, "ca");
    let other_ca = Authority::new(&dir, "other-ca");
    let (server_cert, server_key) = ca.sign(&dir, "server", &["127.0.0.1", "localhost"]);
    let (agent_cert, agent_key) = ca.sign(&dir, "agent", &[]);
    let (tngctl_cert, tngctl_key) = ca.sign(&dir, "tngctl", &[]);
    let (stranger_cert, stranger_key) = other_ca.sign(&dir, "stranger", &[]);
    let api = format!("tls_cert = {server_cert:?}\ntls_key = {server_key:?}\ntls_client_ca = {:?}\n", ca.ca);
    let (_controller, address) = start_controller(&python, &dir, &api);
    let policies = dir.file(
        "policies.toml",
        "[[policy]]\nname = \"tls\"\nmatch = { priority = 5 }\nhost_policy = { congestion_control = \"vegas\", \
         scheduler = \"lowest-rtt\" }\n",
    );
    let options = ["--server", &address, "--ca", &ca.ca, "--cert", &tngctl_cert, "--key", &tngctl_key];
    tngctl(&python, &options, &["policy", "set", &policies]);

    // One set of agents at a time: each holds two ports of the test's small block (see `free_port`).
    let by_name = format!("localhost:{}", address.rsplit(':').next().unwrap());
    for controller in [address.as_str(), &by_name] {
        let dir = TempDir::new("tls-trusted");
        let agents = start_agents(
            &dir,
            &[
                ("controller", controller),
                ("controller-ca", &ca.ca),
                ("controller-cert", &agent_cert),
                ("controller-key", &agent_key),
            ],
        );
        let governed = wait_for(&agents.control, "the controller's policy applies", |c| {
            governed_by(c, "tls", "controller") && c["scheduler"] == "lowest-rtt"
        });
        assert!(channel_controllers(&governed).iter().all(|cc| cc == "vegas"), "{governed:#}");
        echo_through(agents.proxy);
    }

    let refusals = [
        // No client certificate, or one of another CA: the controller ends the handshake without saying why, and the
        // agent logs the transport's error (which one depends on when the connection closed).
        (ca.ca.as_str(), None, "transport error"),
        (&ca.ca, Some((stranger_cert.as_str(), stranger_key.as_str())), "transport error"),
        // The agent refuses a controller whose certificate its CA did not sign.
        (&other_ca.ca, Some((agent_cert.as_str(), agent_key.as_str())), "invalid peer certificate: UnknownIssuer"),
    ];
    let unreachable = format!("controller {address}: unreachable (");
    for (trusted_ca, certificate, reason) in refusals {
        let mut flags = vec![("controller", address.as_str()), ("controller-ca", trusted_ca)];
        if let Some((cert, key)) = certificate {
            flags.extend([("controller-cert", cert), ("controller-key", key)]);
        }
        let dir = TempDir::new("tls-refused");
        let agents = start_agents(&dir, &flags);
        let line = wait_for_log(&agents, &unreachable);
        assert!(line.contains(reason), "{flags:?}: {line}");
        let own = wait_for(&agents.control, "a connection", |_| true);
        assert!(own["policy"].is_null(), "{flags:?}: {own:#}");
        assert_eq!(own["scheduler"], "ack-clocked");
        assert!(channel_controllers(&own).iter().all(|cc| cc == "cubic"), "{own:#}");
        echo_through(agents.proxy);
    }
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
    let connecting = controller_status(&agents.control, |c| c["last_error"].is_string());
    assert_eq!((&connecting["state"], &connecting["subscriptions"]), (&Value::from("connecting"), &Value::from(0)));
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
