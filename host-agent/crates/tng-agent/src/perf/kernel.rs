//! Kernel transports for the perf tool: TCP with a chosen congestion control, and Linux MPTCP.

use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};

use anyhow::{bail, Context, Result};
use socket2::{Domain, Protocol, SockRef, Socket, Type};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

use crate::sockopt::{self, TcpInfo};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelTransport {
    Tcp,
    Mptcp,
}

fn new_socket(transport: KernelTransport, family: &SocketAddr) -> Result<Socket> {
    let protocol = match transport {
        KernelTransport::Tcp => Protocol::TCP,
        KernelTransport::Mptcp => Protocol::from(libc::IPPROTO_MPTCP),
    };
    Socket::new(Domain::for_address(*family), Type::STREAM, Some(protocol)).with_context(|| match transport {
        KernelTransport::Mptcp => "cannot open an MPTCP socket (is net.mptcp.enabled=1?)".to_string(),
        KernelTransport::Tcp => "cannot open a TCP socket".to_string(),
    })
}

/// Connects to `remote`, optionally from `local`, with congestion control `cc` (e.g. cubic, bbr, reno).
pub async fn connect(
    transport: KernelTransport,
    local: Option<SocketAddr>,
    remote: SocketAddr,
    cc: Option<&str>,
) -> Result<TcpStream> {
    let socket = new_socket(transport, &remote)?;
    if let Some(cc) = cc {
        set_congestion(&socket, cc)?;
    }
    socket.set_nonblocking(true)?;
    let socket = TcpSocket::from_std_stream(socket.into());
    if let Some(local) = local {
        socket.bind(local).with_context(|| format!("cannot bind to local address {local}"))?;
    }
    let stream = socket.connect(remote).await.with_context(|| format!("cannot connect to {remote}"))?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Makes `socket` use kernel congestion control `cc`, with one clear error when the kernel lacks or disallows it.
pub fn set_congestion(socket: &impl AsFd, cc: &str) -> Result<()> {
    match SockRef::from(socket).set_tcp_congestion(cc.as_bytes()) {
        Ok(()) => Ok(()),
        Err(err) if err.raw_os_error() == Some(libc::EPERM) => bail!(
            "congestion control {cc:?} is not allowed for this process (add it to \
             net.ipv4.tcp_allowed_congestion_control, or run with CAP_NET_ADMIN)"
        ),
        Err(_) => bail!("congestion control {cc:?} is not available in this kernel"),
    }
}

/// The congestion control `socket` uses, read back from the kernel.
pub fn congestion(socket: &impl AsFd) -> Option<String> {
    let name = SockRef::from(socket).tcp_congestion().ok()?;
    let len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    String::from_utf8(name[..len].to_vec()).ok().filter(|name| !name.is_empty())
}

/// Listens on `addr` with an MPTCP socket, which also accepts plain TCP clients; falls back to TCP where MPTCP is
/// disabled.
pub fn listen(addr: SocketAddr) -> Result<TcpListener> {
    let socket = new_socket(KernelTransport::Mptcp, &addr).or_else(|_| new_socket(KernelTransport::Tcp, &addr))?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into()).with_context(|| format!("cannot listen on {addr}"))?;
    socket.listen(1024)?;
    Ok(TcpListener::from_std(socket.into())?)
}

/// A second descriptor of a connection's socket, to read its counters after the stream was handed away.
pub fn probe(stream: &TcpStream) -> Option<OwnedFd> {
    stream.as_fd().try_clone_to_owned().ok()
}

/// Per-subflow counters of an MPTCP connection, or the one TCP connection's counters.
pub fn subflow_info(socket: &OwnedFd) -> Vec<TcpInfo> {
    match sockopt::mptcp_subflows(socket) {
        Ok(subflows) if !subflows.is_empty() => subflows,
        _ => sockopt::tcp_info(socket).map(|i| vec![i]).unwrap_or_default(),
    }
}
