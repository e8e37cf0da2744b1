//! AF_PACKET raw sockets bound to one interface.
//!
//! Unsafe code is allowed in this module only: no maintained crate exposes a safe `sockaddr_ll` bind or the
//! `SOL_PACKET` options (PACKET_IGNORE_OUTGOING, PACKET_ADD_MEMBERSHIP, PACKET_STATISTICS), so each is one libc call
//! on a file descriptor this module owns, with sizes taken from the types passed.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// Socket buffer size requested for both directions: enough for a few milliseconds of a saturated 1 Gbit/s link.
const SOCKET_BUFFER_BYTES: libc::c_int = 8 << 20;

/// What one non-blocking receive produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    /// A frame of this length was copied to the buffer.
    Frame(usize),
    /// A frame of this length did not fit into the buffer and was discarded.
    Oversized(usize),
    /// A frame this host sent out of the interface (on kernels without PACKET_IGNORE_OUTGOING); skip it.
    Outgoing,
    /// Nothing to read right now.
    Nothing,
}

#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
    interface: String,
}

fn check(result: libc::c_int) -> io::Result<libc::c_int> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result)
    }
}

fn interface_index(interface: &str) -> io::Result<libc::c_int> {
    let name = CString::new(interface)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name contains NUL"))?;
    // SAFETY: `name` is a valid NUL-terminated string that outlives the call.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if index == 0 {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no interface named `{interface}` in this network namespace"),
        ));
    }
    libc::c_int::try_from(index).map_err(|_| io::Error::other("interface index out of range"))
}

impl PacketSocket {
    /// Opens a socket that receives every frame arriving on `interface` (promiscuous, outgoing frames ignored).
    pub fn receiver(interface: &str) -> io::Result<PacketSocket> {
        // Protocol ETH_P_ALL in network byte order, as AF_PACKET expects.
        let all = (libc::ETH_P_ALL as u16).to_be();
        let socket = PacketSocket::bound(interface, all)?;
        // Forwarded frames leave through the other direction's socket on this same interface; without this option
        // the receiver would read them back. Kernels before 4.20 lack it: `receive` then checks the packet type.
        match socket.set_option(libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &1) {
            Err(error) if error.raw_os_error() == Some(libc::ENOPROTOOPT) => {}
            other => other?,
        }
        let index = interface_index(interface)?;
        // SAFETY: packet_mreq is plain old data; all-zero is a valid value.
        let mut membership: libc::packet_mreq = unsafe { zeroed() };
        membership.mr_ifindex = index;
        membership.mr_type = libc::PACKET_MR_PROMISC as u16;
        socket.set_option(libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &membership)?;
        // Root may exceed net.core.rmem_max with the FORCE variant; fall back for unprivileged runs.
        socket
            .set_option(libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &SOCKET_BUFFER_BYTES)
            .or_else(|_| socket.set_option(libc::SOL_SOCKET, libc::SO_RCVBUF, &SOCKET_BUFFER_BYTES))?;
        Ok(socket)
    }

    /// Opens a socket that only sends frames out of `interface` (protocol 0: it receives nothing).
    pub fn sender(interface: &str) -> io::Result<PacketSocket> {
        let socket = PacketSocket::bound(interface, 0)?;
        socket
            .set_option(libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &SOCKET_BUFFER_BYTES)
            .or_else(|_| socket.set_option(libc::SOL_SOCKET, libc::SO_SNDBUF, &SOCKET_BUFFER_BYTES))?;
        Ok(socket)
    }

    /// Creates the socket with protocol 0 (so it sees no traffic yet) and binds it to the interface and protocol,
    /// so it never receives frames from other interfaces.
    fn bound(interface: &str, protocol_be: u16) -> io::Result<PacketSocket> {
        let index = interface_index(interface)?;
        // SAFETY: plain socket(2) call; the returned descriptor is checked and then owned by `OwnedFd`.
        let raw = check(unsafe {
            libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0)
        })?;
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut address: libc::sockaddr_ll = unsafe { zeroed() };
        address.sll_family = libc::AF_PACKET as u16;
        address.sll_protocol = protocol_be;
        address.sll_ifindex = index;
        // SAFETY: the pointer and length describe `address`, which lives across the call.
        check(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&raw const address).cast::<libc::sockaddr>(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })
        .map_err(|error| io::Error::new(error.kind(), format!("bind to `{interface}`: {error}")))?;
        Ok(PacketSocket { fd, interface: interface.to_owned() })
    }

    fn set_option<T>(&self, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
        // SAFETY: the pointer and length describe `value`, which lives across the call.
        check(unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                level,
                name,
                (value as *const T).cast::<libc::c_void>(),
                size_of::<T>() as libc::socklen_t,
            )
        })
        .map(drop)
    }

    pub fn interface(&self) -> &str {
        &self.interface
    }

    /// Reads one frame without blocking.
    pub fn receive(&self, buffer: &mut [u8]) -> io::Result<Received> {
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut address: libc::sockaddr_ll = unsafe { zeroed() };
        let mut address_len = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        // SAFETY: buffer and address pointers/lengths describe live, writable memory; MSG_TRUNC makes the kernel
        // return the real frame length without writing past `buffer`.
        let result = unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                buffer.as_mut_ptr().cast::<libc::c_void>(),
                buffer.len(),
                libc::MSG_TRUNC | libc::MSG_DONTWAIT,
                (&raw mut address).cast::<libc::sockaddr>(),
                &mut address_len,
            )
        };
        if result < 0 {
            let error = io::Error::last_os_error();
            return match error.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(Received::Nothing),
                _ => Err(error),
            };
        }
        let length = result as usize;
        if address.sll_pkttype == libc::PACKET_OUTGOING {
            Ok(Received::Outgoing)
        } else if length > buffer.len() {
            Ok(Received::Oversized(length))
        } else {
            Ok(Received::Frame(length))
        }
    }

    /// Sends one frame without blocking.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        // SAFETY: the pointer and length describe `frame`, which lives across the call.
        let result = unsafe {
            libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast::<libc::c_void>(), frame.len(), libc::MSG_DONTWAIT)
        };
        if result < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Frames the kernel dropped for lack of receive-buffer space since the previous call (reading resets them).
    pub fn take_kernel_drops(&self) -> io::Result<u64> {
        // SAFETY: tpacket_stats is plain old data; all-zero is a valid value.
        let mut stats: libc::tpacket_stats = unsafe { zeroed() };
        let mut len = size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: the pointer and length describe `stats`, which lives across the call.
        check(unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&raw mut stats).cast::<libc::c_void>(),
                &mut len,
            )
        })?;
        Ok(u64::from(stats.tp_drops))
    }
}

impl AsFd for PacketSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
