//! Kernel socket options the agent needs and no safe crate exposes: TCP and MPTCP counters for the perf tool, the
//! kernel state and send limits ALCC works with, forced UDP buffer sizes for the daemon, and the transparent sockets
//! of an on-path relay.
#![allow(unsafe_code)] // getsockopt/setsockopt with caller-owned buffers; with ifaddrs.rs the only unsafe code of the agent.

use std::io;
use std::os::fd::AsRawFd;

use tng_proto::alcc::TcpInfoSample;

/// The fields of Linux `struct tcp_info` the perf tool reports, read by offset so that kernels with a shorter or
/// longer struct both work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpInfo {
    pub rtt_us: u32,
    pub total_retrans: u32,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub segs_out: u32,
}

const TCP_INFO_BUF: usize = 256;
// Offsets in include/uapi/linux/tcp.h.
const OFF_SND_MSS: usize = 16;
const OFF_SACKED: usize = 28;
const OFF_LOST: usize = 32;
const OFF_RETRANS: usize = 36;
const OFF_RTT: usize = 68;
const OFF_TOTAL_RETRANS: usize = 100;
const OFF_BYTES_ACKED: usize = 120;
const OFF_BYTES_RECEIVED: usize = 128;
const OFF_SEGS_OUT: usize = 136;
const OFF_NOTSENT_BYTES: usize = 144;
const OFF_MIN_RTT: usize = 148;
const OFF_DELIVERY_RATE: usize = 160;
const OFF_BYTES_SENT: usize = 200;
const OFF_BYTES_RETRANS: usize = 208;

fn u32_at(buf: &[u8], o: usize) -> u32 {
    buf.get(o..o + 4).map_or(0, |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
}

fn u64_at(buf: &[u8], o: usize) -> u64 {
    buf.get(o..o + 8).map_or(0, |b| u64::from_ne_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
}

impl TcpInfo {
    fn parse(buf: &[u8]) -> TcpInfo {
        let u32_at = |o: usize| u32_at(buf, o);
        let u64_at = |o: usize| u64_at(buf, o);
        TcpInfo {
            rtt_us: u32_at(OFF_RTT),
            total_retrans: u32_at(OFF_TOTAL_RETRANS),
            bytes_acked: u64_at(OFF_BYTES_ACKED),
            bytes_received: u64_at(OFF_BYTES_RECEIVED),
            segs_out: u32_at(OFF_SEGS_OUT),
        }
    }
}

/// `getsockopt(IPPROTO_TCP, TCP_INFO)`.
pub fn tcp_info(socket: &impl AsRawFd) -> io::Result<TcpInfo> {
    let mut buf = [0u8; TCP_INFO_BUF];
    let len = getsockopt(socket, libc::IPPROTO_TCP, libc::TCP_INFO, &mut buf)?;
    Ok(TcpInfo::parse(&buf[..len]))
}

/// The kernel state ALCC feeds its controller (`tng_proto::alcc`); an error on kernels older than 4.19, whose
/// struct ends before the byte counters.
pub fn alcc_tcp_info(socket: &impl AsRawFd) -> io::Result<TcpInfoSample> {
    let mut raw = [0u8; TCP_INFO_BUF];
    let len = getsockopt(socket, libc::IPPROTO_TCP, libc::TCP_INFO, &mut raw)?;
    if len < OFF_BYTES_RETRANS + 8 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("this kernel's TCP_INFO has {len} bytes, without the byte counters ALCC reads (Linux 4.19+)"),
        ));
    }
    let buf = &raw[..len];
    Ok(TcpInfoSample {
        snd_mss: u32_at(buf, OFF_SND_MSS),
        sacked: u32_at(buf, OFF_SACKED),
        lost: u32_at(buf, OFF_LOST),
        retrans: u32_at(buf, OFF_RETRANS),
        rtt_us: u32_at(buf, OFF_RTT),
        min_rtt_us: u32_at(buf, OFF_MIN_RTT),
        notsent_bytes: u32_at(buf, OFF_NOTSENT_BYTES),
        bytes_acked: u64_at(buf, OFF_BYTES_ACKED),
        bytes_sent: u64_at(buf, OFF_BYTES_SENT),
        bytes_retrans: u64_at(buf, OFF_BYTES_RETRANS),
        delivery_rate: u64_at(buf, OFF_DELIVERY_RATE),
    })
}

/// `TCP_NOTSENT_LOWAT`: the socket reports itself writable only while fewer than `bytes` written bytes wait unsent.
pub fn set_notsent_lowat(socket: &impl AsRawFd, bytes: u32) -> io::Result<()> {
    let value = libc::c_int::try_from(bytes).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    setsockopt(socket, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT, &value)
}

/// `TCP_QUICKACK`: the kernel sends any ACK it is delaying now and acknowledges at once until it decides otherwise.
pub fn quick_ack(socket: &impl AsRawFd) -> io::Result<()> {
    setsockopt(socket, libc::IPPROTO_TCP, libc::TCP_QUICKACK, &(1 as libc::c_int))
}

/// `SO_MAX_PACING_RATE`: the kernel paces the socket at no more than `bytes_per_second`.
pub fn set_max_pacing_rate(socket: &impl AsRawFd, bytes_per_second: u64) -> io::Result<()> {
    setsockopt(socket, libc::SOL_SOCKET, libc::SO_MAX_PACING_RATE, &bytes_per_second)
}

// From include/uapi/linux/mptcp.h.
const SOL_MPTCP: libc::c_int = 284;
const MPTCP_TCPINFO: libc::c_int = 2;
const SUBFLOW_HEADER: usize = 16; // struct mptcp_subflow_data
const MAX_SUBFLOWS: usize = 8;

/// Per-subflow `tcp_info` of an MPTCP socket (`MPTCP_TCPINFO`), one entry per subflow.
pub fn mptcp_subflows(socket: &impl AsRawFd) -> io::Result<Vec<TcpInfo>> {
    let mut buf = vec![0u8; SUBFLOW_HEADER + MAX_SUBFLOWS * TCP_INFO_BUF];
    // The header tells the kernel how large our per-subflow element is and receives how many subflows exist.
    buf[0..4].copy_from_slice(&(SUBFLOW_HEADER as u32).to_ne_bytes());
    buf[12..16].copy_from_slice(&(TCP_INFO_BUF as u32).to_ne_bytes());
    let len = getsockopt(socket, SOL_MPTCP, MPTCP_TCPINFO, &mut buf)?;
    let field = |o: usize| u32::from_ne_bytes([buf[o], buf[o + 1], buf[o + 2], buf[o + 3]]) as usize;
    let (count, element) = (field(4), field(12));
    if element == 0 || len < SUBFLOW_HEADER {
        return Ok(Vec::new());
    }
    Ok((0..count.min(MAX_SUBFLOWS))
        .filter_map(|i| buf.get(SUBFLOW_HEADER + i * element..SUBFLOW_HEADER + (i + 1) * element))
        .map(TcpInfo::parse)
        .collect())
}

/// Sets the send and receive buffers to `bytes` past `net.core.{w,r}mem_max` (SO_SNDBUFFORCE / SO_RCVBUFFORCE);
/// needs CAP_NET_ADMIN, so it fails for unprivileged users, who then get what the sysctls allow.
pub fn force_buffer_sizes(socket: &impl AsRawFd, bytes: usize) -> io::Result<()> {
    let value = libc::c_int::try_from(bytes).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    for name in [libc::SO_SNDBUFFORCE, libc::SO_RCVBUFFORCE] {
        setsockopt(socket, libc::SOL_SOCKET, name, &value)?;
    }
    Ok(())
}

/// Lets `socket` receive what a TPROXY rule diverts to it and send from addresses that are not the host's
/// (IP_TRANSPARENT, or IPV6_TRANSPARENT for an IPv6 socket); needs CAP_NET_ADMIN.
pub fn set_transparent(socket: &impl AsRawFd, ipv6: bool) -> io::Result<()> {
    let on: libc::c_int = 1;
    if ipv6 {
        setsockopt(socket, libc::SOL_IPV6, libc::IPV6_TRANSPARENT, &on)
    } else {
        setsockopt(socket, libc::SOL_IP, libc::IP_TRANSPARENT, &on)
    }
}

/// `setsockopt` with a plain integer value.
fn setsockopt<T: Copy>(socket: &impl AsRawFd, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` is valid for reads of its size for the duration of the call, and that size is passed.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            std::ptr::from_ref(value).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn getsockopt(socket: &impl AsRawFd, level: libc::c_int, name: libc::c_int, buf: &mut [u8]) -> io::Result<usize> {
    let mut len = libc::socklen_t::try_from(buf.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `buf` is valid for writes of `len` bytes and outlives the call; the kernel writes at most `len`.
    let rc = unsafe { libc::getsockopt(socket.as_raw_fd(), level, name, buf.as_mut_ptr().cast(), &mut len) };
    if rc == 0 {
        Ok(len as usize)
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn tcp_info_counts_bytes_on_a_loopback_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        client.write_all(&[7u8; 10_000]).unwrap();
        let mut buf = vec![0u8; 10_000];
        server.read_exact(&mut buf).unwrap();
        let info = tcp_info(&server).unwrap();
        assert_eq!(info.bytes_received, 10_000);
        let sent = tcp_info(&client).unwrap();
        assert!(sent.segs_out >= 1 && sent.rtt_us > 0, "{sent:?}");
        let alcc = alcc_tcp_info(&client).unwrap();
        assert_eq!((alcc.bytes_sent, alcc.bytes_retrans), (10_000, 0), "{alcc:?}");
        // The acknowledged sequence space includes the SYN.
        assert!((10_000..=10_001).contains(&alcc.bytes_acked), "{alcc:?}");
        assert!(alcc.snd_mss > 0 && alcc.min_rtt_us > 0 && alcc.min_rtt_us <= alcc.rtt_us.max(1) * 8, "{alcc:?}");
        assert_eq!((alcc.in_flight_bytes(), alcc.notsent_bytes), (0, 0), "everything was read: {alcc:?}");
    }

    #[test]
    fn send_limits_take_effect_on_a_tcp_socket() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        set_notsent_lowat(&client, 16_384).unwrap();
        set_max_pacing_rate(&client, 1_250_000).unwrap();
        quick_ack(&client).unwrap();
        let mut quick = [0u8; 4];
        let len = getsockopt(&client, libc::IPPROTO_TCP, libc::TCP_QUICKACK, &mut quick).unwrap();
        assert_eq!((len, i32::from_ne_bytes(quick)), (4, 1), "quick ACKs on");
        let mut buf = [0u8; 4];
        let len = getsockopt(&client, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT, &mut buf).unwrap();
        assert_eq!((len, i32::from_ne_bytes(buf)), (4, 16_384));
        let mut rate = [0u8; 8];
        let len = getsockopt(&client, libc::SOL_SOCKET, libc::SO_MAX_PACING_RATE, &mut rate).unwrap();
        assert_eq!(u64_at(&rate[..len.max(4)], 0) & u64::from(u32::MAX), 1_250_000);
    }
}
