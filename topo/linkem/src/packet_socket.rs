//! AF_PACKET raw sockets bound to one interface.
//!
//! Unsafe code is allowed in this module only: no maintained crate exposes a safe `sockaddr_ll` bind, the
//! `SOL_PACKET` options (PACKET_IGNORE_OUTGOING, PACKET_ADD_MEMBERSHIP, PACKET_STATISTICS, PACKET_AUXDATA) or the
//! PACKET_AUXDATA control message, so each is one libc call on a file descriptor this module owns, with sizes taken
//! from the types passed.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::mem::{size_of, size_of_val, zeroed};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// Socket buffer size requested for both directions: enough for a few milliseconds of a saturated 1 Gbit/s link.
const SOCKET_BUFFER_BYTES: libc::c_int = 8 << 20;

/// Room for the control messages of one receive: a PACKET_AUXDATA message (16-byte header, 20-byte
/// `tpacket_auxdata`) with space to spare; `u64` words keep it aligned for `cmsghdr`.
const CONTROL_WORDS: usize = 16;

/// The state of a received frame's TCP or UDP checksum, from the kernel's PACKET_AUXDATA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportChecksum {
    /// Whatever the sender put there (complete unless the frame is corrupt).
    AsSent,
    /// Left to checksum offload (TP_STATUS_CSUMNOTREADY): the field holds only the pseudo-header sum. The IP header
    /// starts `network_offset` bytes into the frame.
    Partial { network_offset: usize },
}

/// What one non-blocking receive produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    /// A frame of `length` bytes was copied to the buffer.
    Frame { length: usize, checksum: TransportChecksum },
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
        // Tells each frame's checksum state, so frames a sender left to checksum offload can be completed.
        socket.set_option(libc::SOL_PACKET, libc::PACKET_AUXDATA, &1)?;
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
        // SAFETY: sockaddr_ll and msghdr are plain old data; all-zero is a valid value.
        let mut address: libc::sockaddr_ll = unsafe { zeroed() };
        let mut control = [0u64; CONTROL_WORDS];
        let mut data = libc::iovec { iov_base: buffer.as_mut_ptr().cast::<libc::c_void>(), iov_len: buffer.len() };
        // SAFETY: as above.
        let mut message: libc::msghdr = unsafe { zeroed() };
        message.msg_name = (&raw mut address).cast::<libc::c_void>();
        message.msg_namelen = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        message.msg_iov = &raw mut data;
        message.msg_iovlen = 1;
        message.msg_control = control.as_mut_ptr().cast::<libc::c_void>();
        message.msg_controllen = size_of_val(&control) as _;
        // SAFETY: every pointer in `message` describes live, writable memory of the given length; MSG_TRUNC makes
        // the kernel return the real frame length without writing past `buffer`.
        let result = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut message, libc::MSG_TRUNC | libc::MSG_DONTWAIT) };
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
            Ok(Received::Frame { length, checksum: transport_checksum(&message) })
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

/// Reads the checksum state from the PACKET_AUXDATA control message that `recvmsg` filled into `message`.
fn transport_checksum(message: &libc::msghdr) -> TransportChecksum {
    // SAFETY: `message` was filled by recvmsg, so its control buffer holds msg_controllen bytes of well-formed
    // control messages, which the CMSG macros walk without leaving it.
    let mut header = unsafe { libc::CMSG_FIRSTHDR(message) };
    while !header.is_null() {
        // SAFETY: non-null headers returned by the CMSG macros point into the control buffer.
        let (level, kind) = unsafe { ((*header).cmsg_level, (*header).cmsg_type) };
        if level == libc::SOL_PACKET && kind == libc::PACKET_AUXDATA {
            // SAFETY: the kernel writes a whole tpacket_auxdata after a PACKET_AUXDATA header; the data may be less
            // aligned than the struct, hence the unaligned read.
            let auxdata: libc::tpacket_auxdata =
                unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(header).cast::<libc::tpacket_auxdata>()) };
            if auxdata.tp_status & libc::TP_STATUS_CSUMNOTREADY != 0 {
                return TransportChecksum::Partial { network_offset: usize::from(auxdata.tp_net) };
            }
            return TransportChecksum::AsSent;
        }
        // SAFETY: as for CMSG_FIRSTHDR; `header` came from the same message.
        header = unsafe { libc::CMSG_NXTHDR(message, header) };
    }
    TransportChecksum::AsSent
}

impl AsFd for PacketSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
