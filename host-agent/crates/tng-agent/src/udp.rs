//! The endpoint layer on real sockets: one UDP socket per local address, driven through quinn-udp for GSO, GRO,
//! ECN and source-address control.

use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{self, Poll};

use anyhow::{Context, Result};
use quinn_udp::{EcnCodepoint as UdpEcn, RecvMeta, Transmit, UdpSocketState};
use socket2::{Domain, Protocol, Type};
use tng_proto::EcnCodepoint;
use tokio::io::Interest;
use tokio::net::UdpSocket;

/// Largest datagram we read; GRO may coalesce several into one buffer.
const RECV_BUFFER: usize = 64 * 1024;
/// Socket buffers large enough for a bandwidth-delay product of ~1 Gbit/s x 50 ms.
const SOCKET_BUFFER: usize = 8 * 1024 * 1024;

/// A bound UDP socket and its quinn-udp state.
pub struct Socket {
    pub local: SocketAddr,
    io: UdpSocket,
    state: UdpSocketState,
    /// A server socket bound to the unspecified address (or a transparent one) reports each datagram's destination
    /// address as its local address (IP_PKTINFO) and answers from that address, so that a multihomed server's
    /// replies come from the address the client sent to.
    per_destination: bool,
}

/// What one receive returned: a datagram, or several of `stride` bytes (the last may be shorter) that GRO coalesced,
/// borrowed from the caller's buffer so that receiving allocates and copies nothing.
pub struct Datagrams<'a> {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub ecn: Option<EcnCodepoint>,
    stride: usize,
    contents: &'a [u8],
}

impl Datagrams<'_> {
    /// The UDP payloads, one per datagram.
    pub fn payloads(&self) -> impl Iterator<Item = &[u8]> {
        self.contents.chunks(self.stride.max(1))
    }
}

impl Socket {
    /// Binds `local`, sizes the buffers and warns when the kernel caps them. With `per_destination`, see
    /// [`Socket::per_destination`].
    pub fn bind(local: SocketAddr, per_destination: bool) -> Result<Arc<Socket>> {
        let std_socket = std::net::UdpSocket::bind(local).with_context(|| format!("cannot bind UDP {local}"))?;
        let unspecified = std_socket.local_addr()?.ip().is_unspecified();
        Socket::configure(std_socket, per_destination && unspecified)
    }

    /// Binds `local` transparently (IP_TRANSPARENT, IPV6_TRANSPARENT): a TPROXY rule may divert datagrams addressed
    /// to other hosts to it, each reports the address it was sent to as its local address, and answers leave from
    /// that address (an on-path relay answering for the server). Needs CAP_NET_ADMIN.
    pub fn bind_transparent(local: SocketAddr) -> Result<Arc<Socket>> {
        let socket = socket2::Socket::new(Domain::for_address(local), Type::DGRAM, Some(Protocol::UDP))
            .with_context(|| format!("cannot open a UDP socket for {local}"))?;
        crate::sockopt::set_transparent(&socket, local.is_ipv6()).with_context(|| {
            format!("cannot make UDP {local} transparent (IP_TRANSPARENT needs CAP_NET_ADMIN: run as root)")
        })?;
        socket.bind(&local.into()).with_context(|| format!("cannot bind UDP {local}"))?;
        Socket::configure(socket.into(), true)
    }

    fn configure(std_socket: std::net::UdpSocket, per_destination: bool) -> Result<Arc<Socket>> {
        let local = std_socket.local_addr()?;
        let state = UdpSocketState::new((&std_socket).into()).context("cannot configure the UDP socket")?;
        let sock_ref = socket2::SockRef::from(&std_socket);
        if crate::sockopt::force_buffer_sizes(&std_socket, SOCKET_BUFFER).is_err() {
            let _ = sock_ref.set_send_buffer_size(SOCKET_BUFFER);
            let _ = sock_ref.set_recv_buffer_size(SOCKET_BUFFER);
        }
        for (what, granted, sysctl) in [
            ("send", sock_ref.send_buffer_size().unwrap_or(0), "wmem_max"),
            ("receive", sock_ref.recv_buffer_size().unwrap_or(0), "rmem_max"),
        ] {
            // Linux reports twice the granted size; less than we asked means net.core.*mem_max caps us.
            if granted / 2 < SOCKET_BUFFER {
                tracing::warn!(
                    "UDP {what} buffer of {local} capped at {} bytes (wanted {SOCKET_BUFFER}); raise \
                     net.core.{sysctl} for high bandwidth-delay paths",
                    granted / 2
                );
            }
        }
        std_socket.set_nonblocking(true)?;
        Ok(Arc::new(Socket { local, io: UdpSocket::from_std(std_socket)?, state, per_destination }))
    }

    /// Largest number of equal-sized datagrams one send may carry (GSO), 1 without GSO.
    pub fn max_segments(&self) -> usize {
        self.state.max_gso_segments()
    }

    /// Sends `contents` from `local` to `remote` as datagrams of `segment_size` bytes (the last may be shorter).
    pub async fn send(
        &self,
        local: SocketAddr,
        remote: SocketAddr,
        ecn: Option<EcnCodepoint>,
        contents: &[u8],
        segment_size: usize,
    ) -> io::Result<()> {
        let transmit = Transmit {
            destination: remote,
            ecn: ecn.map(to_udp_ecn),
            contents,
            segment_size: (contents.len() > segment_size).then_some(segment_size),
            src_ip: (self.per_destination && !local.ip().is_unspecified()).then_some(local.ip()),
        };
        loop {
            self.io.writable().await?;
            match self.io.try_io(Interest::WRITABLE, || self.state.try_send((&self.io).into(), &transmit)) {
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
                other => return other,
            }
        }
    }

    /// Ready when datagrams may be waiting (then [`Socket::try_recv`] says whether they are).
    pub fn poll_recv_ready(&self, cx: &mut task::Context<'_>) -> Poll<io::Result<()>> {
        self.io.poll_recv_ready(cx)
    }

    /// Receives what is waiting without blocking: `None` when nothing is.
    pub fn try_recv<'a>(&self, buffer: &'a mut [u8]) -> io::Result<Option<Datagrams<'a>>> {
        let mut meta = [RecvMeta::default()];
        let received = {
            let mut slices = [IoSliceMut::new(buffer)];
            self.io.try_io(Interest::READABLE, || self.state.recv((&self.io).into(), &mut slices, &mut meta))
        };
        match received {
            Ok(0) => Ok(None),
            Ok(_) => {
                let m = &meta[0];
                let local = match m.dst_ip {
                    Some(ip) if self.per_destination => SocketAddr::new(ip, self.local.port()),
                    _ => self.local,
                };
                Ok(Some(Datagrams {
                    local,
                    remote: m.addr,
                    ecn: m.ecn.map(from_udp_ecn),
                    stride: m.stride,
                    contents: &buffer[..m.len],
                }))
            }
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(err) => Err(err),
        }
    }
}

/// Receive buffer for [`Socket::try_recv`].
pub fn recv_buffer() -> Vec<u8> {
    vec![0u8; RECV_BUFFER]
}

fn to_udp_ecn(ecn: EcnCodepoint) -> UdpEcn {
    match ecn {
        EcnCodepoint::Ect0 => UdpEcn::Ect0,
        EcnCodepoint::Ect1 => UdpEcn::Ect1,
        EcnCodepoint::Ce => UdpEcn::Ce,
    }
}

fn from_udp_ecn(ecn: UdpEcn) -> EcnCodepoint {
    match ecn {
        UdpEcn::Ect0 => EcnCodepoint::Ect0,
        UdpEcn::Ect1 => EcnCodepoint::Ect1,
        UdpEcn::Ce => EcnCodepoint::Ce,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_gso_send_arrives_as_separate_payloads() {
        let localhost = "127.0.0.1:0".parse().expect("address");
        let (sender, receiver) = (Socket::bind(localhost, false).unwrap(), Socket::bind(localhost, false).unwrap());
        let contents: Vec<u8> = (0..3 * 100 + 40).map(|i| (i / 100) as u8).collect();
        let segments = if sender.max_segments() > 1 { 100 } else { contents.len() };
        sender.send(sender.local, receiver.local, None, &contents, segments).await.expect("send");
        let mut buffer = recv_buffer();
        let mut payloads: Vec<Vec<u8>> = Vec::new();
        while payloads.concat().len() < contents.len() {
            std::future::poll_fn(|cx| receiver.poll_recv_ready(cx)).await.expect("readable");
            if let Some(received) = receiver.try_recv(&mut buffer).expect("receive") {
                payloads.extend(received.payloads().map(<[u8]>::to_vec));
            }
        }
        assert_eq!(payloads.concat(), contents);
        if segments == 100 {
            let sizes: Vec<usize> = payloads.iter().map(Vec::len).collect();
            assert_eq!(sizes, [100, 100, 100, 40]);
        }
    }
}
