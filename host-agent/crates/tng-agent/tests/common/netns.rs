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

/// Two namespaces with loopback up, joined by `paths` veth pairs: `c{i}` in the client namespace with
/// 10.{subnet}.{i}.1/24, `s{i}` in the server namespace with 10.{subnet}.{i}.2/24, all up; removed on drop.
pub struct NamespacePair {
    pub client: String,
    pub server: String,
}

impl NamespacePair {
    /// Namespaces left over by an earlier run under the same names are removed first.
    pub fn new(client: String, server: String, subnet: u8, paths: u8) -> NamespacePair {
        for ns in [&client, &server] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
            ip(&format!("netns add {ns}"));
            ip(&format!("-n {ns} link set lo up"));
        }
        let net = NamespacePair { client, server };
        let (c, s) = (&net.client, &net.server);
        for path in 0..paths {
            ip(&format!("link add c{path} netns {c} type veth peer name s{path} netns {s}"));
            ip(&format!("-n {c} addr add 10.{subnet}.{path}.1/24 dev c{path}"));
            ip(&format!("-n {s} addr add 10.{subnet}.{path}.2/24 dev s{path}"));
            ip(&format!("-n {c} link set c{path} up"));
            ip(&format!("-n {s} link set s{path} up"));
        }
        net
    }
}

impl Drop for NamespacePair {
    fn drop(&mut self) {
        for ns in [&self.client, &self.server] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

/// Two namespaces joined by two veth pairs (10.77.0.0/24 and 10.77.1.0/24), the client able to reach the server's
/// path-0 address from both of its addresses; removed on drop.
pub struct TwoPaths {
    pub client: String,
    pub server: String,
    _pair: NamespacePair,
}

impl TwoPaths {
    /// `name` tells apart the namespaces of tests running at once.
    pub fn new(name: &str) -> TwoPaths {
        let tag = std::process::id() % 100_000;
        let pair = NamespacePair::new(format!("tngc{name}{tag}"), format!("tngs{name}{tag}"), 77, 2);
        let (c, s) = (&pair.client, &pair.server);
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
        TwoPaths { client: c.clone(), server: s.clone(), _pair: pair }
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
