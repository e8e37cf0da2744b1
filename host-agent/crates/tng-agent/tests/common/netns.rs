//! Network namespaces for the end-to-end tests that need real links (root only): two namespaces joined by two veth
//! pairs, and the `ip`/`sysctl` calls that build them.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use super::{Process, TNG};

pub fn is_root() -> bool {
    // SAFETY-free check: /proc/self/status carries the effective uid.
    std::fs::read_to_string("/proc/self/status")
        .map(|s| s.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0")))
        .unwrap_or(false)
}

pub fn ip(args: &str) -> Output {
    let out = Command::new("ip").args(args.split_whitespace()).output().expect("ip runs");
    assert!(out.status.success(), "ip {args}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

pub fn sysctl(ns: &str, key: &str, value: &str) {
    let out =
        Command::new("ip").args(["netns", "exec", ns, "sysctl", "-qw", &format!("{key}={value}")]).output().unwrap();
    assert!(out.status.success(), "sysctl {key}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Two namespaces joined by two veth pairs; removed on drop.
pub struct TwoPaths {
    pub client: String,
    pub server: String,
}

impl TwoPaths {
    /// `name` tells apart the namespaces of tests running at once.
    pub fn new(name: &str) -> TwoPaths {
        let tag = std::process::id() % 100_000;
        let (client, server) = (format!("tngc{name}{tag}"), format!("tngs{name}{tag}"));
        let _ = Command::new("ip").args(["netns", "del", &client]).output();
        let _ = Command::new("ip").args(["netns", "del", &server]).output();
        ip(&format!("netns add {client}"));
        ip(&format!("netns add {server}"));
        let net = TwoPaths { client, server };
        let (c, s) = (&net.client, &net.server);
        for path in 0..2 {
            ip(&format!("link add c{path} netns {c} type veth peer name s{path} netns {s}"));
            ip(&format!("-n {c} addr add 10.77.{path}.1/24 dev c{path}"));
            ip(&format!("-n {s} addr add 10.77.{path}.2/24 dev s{path}"));
            ip(&format!("-n {c} link set c{path} up"));
            ip(&format!("-n {s} link set s{path} up"));
        }
        ip(&format!("-n {c} link set lo up"));
        ip(&format!("-n {s} link set lo up"));
        // The client reaches the server's path-0 address from both of its addresses: traffic from 10.77.1.1 leaves
        // by c1 (policy routing), and the server answers it by s1; reverse-path filtering would drop that.
        ip(&format!("-n {c} rule add from 10.77.1.1 table 101"));
        ip(&format!("-n {c} route add 10.77.0.2/32 dev c1 table 101"));
        for ns in [c, s] {
            sysctl(ns, "net.ipv4.conf.all.rp_filter", "0");
            sysctl(ns, "net.ipv4.conf.default.rp_filter", "0");
            for path in 0..2 {
                let dev = if ns == c { format!("c{path}") } else { format!("s{path}") };
                sysctl(ns, &format!("net.ipv4.conf.{dev}.rp_filter"), "0");
            }
        }
        net
    }
}

impl Drop for TwoPaths {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.client]).output();
        let _ = Command::new("ip").args(["netns", "del", &self.server]).output();
    }
}

/// Shapes what `dev` in namespace `ns` sends: `rate` (tc syntax, e.g. `5mbit`) with a drop-tail queue of `latency`.
pub fn tbf(ns: &str, dev: &str, rate: &str, latency: &str) {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root"])
        .args(["tbf", "rate", rate, "burst", "64kb", "latency", latency])
        .output()
        .expect("tc runs");
    assert!(out.status.success(), "tc: {}", String::from_utf8_lossy(&out.stderr));
}

/// `tng perf server` on port 5201 of every address of namespace `ns`, given half a second to listen; killed when
/// dropped.
pub fn perf_server(ns: &str) -> Process {
    let child = Command::new("ip")
        .args(["netns", "exec", ns, TNG, "--log-level", "error", "perf", "server", "--listen", "0.0.0.0:5201"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn tng perf server");
    std::thread::sleep(Duration::from_millis(500));
    Process(child)
}
