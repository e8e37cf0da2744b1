//! A three-namespace test topology: host A and host B joined through a link namespace where linkem bridges two
//! veths. Used by the accuracy tests and the benchmark; everything it creates is removed when it is dropped.
//!
//! ```text
//!  ns <p>-a: <p>a 10.77.0.1 --veth-- <p>la [ns <p>-l: linkem] <p>lb --veth-- <p>b 10.77.0.2 :ns <p>-b
//! ```
//! Offloads are off on all four veths (frames are at most MTU-sized and carry full checksums) unless the caller asks
//! for transmit checksum offload, IPv6 is off (no router solicitations through the emulator) and the hosts have
//! static ARP entries (no ARP through a lossy link).

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rustix::thread::{move_into_link_name_space, LinkNameSpaceType};
use serde_json::Value;

pub const HOST_A_ADDRESS: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
pub const HOST_B_ADDRESS: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
const HOST_A_MAC: &str = "02:4c:4b:00:00:01";
const HOST_B_MAC: &str = "02:4c:4b:00:00:02";
const PREFIX_LENGTH: u8 = 24;
/// Linux limits interface names to 15 bytes.
const MAX_INTERFACE_NAME: usize = 15;
const LINKEM_START_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether this process can create namespaces (it must be root).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn run(command: &mut Command) -> io::Result<()> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|error| io::Error::new(error.kind(), format!("cannot run {command:?}: {error}")))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{command:?} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

/// A named network namespace (`ip netns`).
#[derive(Debug)]
pub struct Namespace {
    name: String,
}

impl Namespace {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A command that runs `program` inside this namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.name, program]);
        command
    }

    /// Runs `task` on a thread that has entered this namespace. Sockets it creates stay in the namespace, so a
    /// test can create them here and use them from any thread.
    pub fn run<T: Send>(&self, task: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
        let path = Path::new("/run/netns").join(&self.name);
        thread::scope(|scope| {
            scope
                .spawn(|| {
                    let handle = File::open(&path)?;
                    move_into_link_name_space(handle.as_fd(), Some(LinkNameSpaceType::Network))?;
                    task()
                })
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("namespace task panicked")))
        })
    }
}

/// Which offloads the veths keep. Segmentation and receive offloads are always off: they would hand linkem 64 KB
/// frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offloads {
    /// Every offload off, as docs/linkem.md asks: frames carry complete checksums.
    Off,
    /// Transmit checksum offload left on (`ethtool -K IFACE tx on`), as a user who forgets `tx off` has it: TCP and
    /// UDP frames reach linkem with partial checksums.
    TxChecksum,
}

impl Offloads {
    fn ethtool_arguments(self) -> [&'static str; 10] {
        let tx = match self {
            Offloads::Off => "off",
            Offloads::TxChecksum => "on",
        };
        ["tx", tx, "rx", "off", "tso", "off", "gso", "off", "gro", "off"]
    }
}

/// The topology; dropping it deletes the namespaces and with them the veths.
#[derive(Debug)]
pub struct Lab {
    pub host_a: Namespace,
    pub link: Namespace,
    pub host_b: Namespace,
    pub host_a_interface: String,
    pub host_b_interface: String,
    pub link_interface_a: String,
    pub link_interface_b: String,
    created: Vec<String>,
}

static LABS_CREATED: AtomicU32 = AtomicU32::new(0);

impl Lab {
    /// Creates the topology with every offload off. `kind` (a few letters) starts every name, followed by the
    /// process id and a counter, so concurrent runs never collide.
    pub fn create(kind: &str) -> io::Result<Lab> {
        Lab::create_with(kind, Offloads::Off)
    }

    /// Creates the topology with the given offloads on all four veths.
    pub fn create_with(kind: &str, offloads: Offloads) -> io::Result<Lab> {
        if !is_root() {
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, "creating network namespaces needs root"));
        }
        let prefix = format!("{kind}{}x{}", std::process::id(), LABS_CREATED.fetch_add(1, Ordering::Relaxed));
        if prefix.len() + 2 > MAX_INTERFACE_NAME {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("name prefix `{prefix}` is too long for interface names"),
            ));
        }
        let namespace = |suffix: &str| Namespace { name: format!("{prefix}-{suffix}") };
        let mut lab = Lab {
            host_a: namespace("a"),
            link: namespace("l"),
            host_b: namespace("b"),
            host_a_interface: format!("{prefix}a"),
            host_b_interface: format!("{prefix}b"),
            link_interface_a: format!("{prefix}la"),
            link_interface_b: format!("{prefix}lb"),
            created: Vec::new(),
        };
        lab.build(offloads)?;
        Ok(lab)
    }

    fn build(&mut self, offloads: Offloads) -> io::Result<()> {
        for name in [&self.host_a.name, &self.link.name, &self.host_b.name] {
            run(Command::new("ip").args(["netns", "add", name]))?;
            self.created.push(name.clone());
            run(Command::new("ip").args(["-n", name, "link", "set", "lo", "up"]))?;
        }
        for namespace in [&self.host_a, &self.link, &self.host_b] {
            // /proc/sys/net shows the namespace of the thread that opens it.
            namespace.run(|| {
                for key in ["all", "default"] {
                    std::fs::write(format!("/proc/sys/net/ipv6/conf/{key}/disable_ipv6"), "1")?;
                }
                Ok(())
            })?;
        }
        let hosts = [
            (&self.host_a, &self.host_a_interface, &self.link_interface_a, HOST_A_MAC, HOST_A_ADDRESS),
            (&self.host_b, &self.host_b_interface, &self.link_interface_b, HOST_B_MAC, HOST_B_ADDRESS),
        ];
        for (host, interface, link_interface, mac, address) in hosts {
            run(Command::new("ip").args([
                "link",
                "add",
                interface,
                "netns",
                &host.name,
                "address",
                mac,
                "type",
                "veth",
                "peer",
                "name",
                link_interface,
                "netns",
                &self.link.name,
            ]))?;
            run(Command::new("ip").args([
                "-n",
                &host.name,
                "addr",
                "add",
                &format!("{address}/{PREFIX_LENGTH}"),
                "dev",
                interface,
            ]))?;
            for (namespace, name) in [(host, interface), (&self.link, link_interface)] {
                // Offloads would hand linkem 64 KB GRO frames and send TCP with partial checksums.
                run(namespace.command("ethtool").args(["-K", name]).args(offloads.ethtool_arguments()))?;
                run(Command::new("ip").args(["-n", &namespace.name, "link", "set", name, "up"]))?;
            }
        }
        for (host, interface, peer_address, peer_mac) in [
            (&self.host_a, &self.host_a_interface, HOST_B_ADDRESS, HOST_B_MAC),
            (&self.host_b, &self.host_b_interface, HOST_A_ADDRESS, HOST_A_MAC),
        ] {
            run(Command::new("ip").args([
                "-n",
                &host.name,
                "neigh",
                "replace",
                &peer_address.to_string(),
                "lladdr",
                peer_mac,
                "dev",
                interface,
                "nud",
                "permanent",
            ]))?;
        }
        Ok(())
    }

    /// Starts `linkem` (the binary at `executable`) in the link namespace and waits until its control socket
    /// answers, which happens only after both interfaces' sockets are open.
    pub fn start_linkem(&self, executable: &Path, ab: &str, ba: &str, seed: u64) -> io::Result<LinkemProcess> {
        let control_path = std::env::temp_dir().join(format!("{}.sock", self.link.name));
        let child = self
            .link
            .command(&executable.to_string_lossy())
            .args(["--a", &self.link_interface_a, "--b", &self.link_interface_b, "--ab", ab, "--ba", ba])
            .arg("--seed")
            .arg(seed.to_string())
            .arg("--control")
            .arg(&control_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        let mut process = LinkemProcess { child, control_path };
        let started = Instant::now();
        while process.request(r#"{"cmd":"get"}"#).is_err() {
            if let Some(status) = process.child.try_wait()? {
                let mut stderr = String::new();
                if let Some(mut pipe) = process.child.stderr.take() {
                    pipe.read_to_string(&mut stderr)?;
                }
                return Err(io::Error::other(format!("linkem exited ({status}): {}", stderr.trim())));
            }
            if started.elapsed() > LINKEM_START_TIMEOUT {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "linkem did not open its control socket"));
            }
            thread::sleep(Duration::from_millis(20));
        }
        Ok(process)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for name in self.created.drain(..) {
            // Nothing useful can be done about a failed delete while dropping; the next run uses other names.
            let _ = run(Command::new("ip").args(["netns", "del", &name]));
        }
    }
}

/// A running linkem; dropping it kills exactly this process.
#[derive(Debug)]
pub struct LinkemProcess {
    child: Child,
    control_path: PathBuf,
}

impl LinkemProcess {
    /// Sends one control request and returns the parsed answer.
    pub fn request(&self, request: &str) -> io::Result<Value> {
        let mut stream = UnixStream::connect(&self.control_path)?;
        stream.set_read_timeout(Some(Duration::from_secs(2)))?;
        writeln!(stream, "{request}")?;
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line)?;
        serde_json::from_str(&line).map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))
    }

    pub fn counters(&self) -> io::Result<Value> {
        self.request(r#"{"cmd":"counters"}"#)
    }

    /// Stops linkem and returns what it wrote to stderr.
    pub fn stop(mut self) -> io::Result<String> {
        self.child.kill()?;
        self.child.wait()?;
        let mut stderr = String::new();
        if let Some(mut pipe) = self.child.stderr.take() {
            pipe.read_to_string(&mut stderr)?;
        }
        Ok(stderr)
    }
}

impl Drop for LinkemProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.control_path);
    }
}
