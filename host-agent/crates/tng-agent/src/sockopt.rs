//! Kernel socket options the agent needs and no safe crate exposes: TCP and MPTCP counters for the perf tool, and
//! forced UDP buffer sizes for the daemon.
#![allow(unsafe_code)] // getsockopt/setsockopt with caller-owned buffers; the only unsafe code of the agent.

use std::io;
use std::os::fd::AsRawFd;

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
const OFF_RTT: usize = 68;
const OFF_TOTAL_RETRANS: usize = 100;
const OFF_BYTES_ACKED: usize = 120;
const OFF_BYTES_RECEIVED: usize = 128;
const OFF_SEGS_OUT: usize = 136;

impl TcpInfo {
    fn parse(buf: &[u8]) -> TcpInfo {
        let u32_at = |o: usize| buf.get(o..o + 4).map_or(0, |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
        let u64_at = |o: usize| {
            buf.get(o..o + 8).map_or(0, |b| u64::from_ne_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
        };
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
        // SAFETY: `value` is a valid c_int for the duration of the call and its size is passed.
        let rc = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                name,
                std::ptr::from_ref(&value).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
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
    }
}
