//! Exact round trips of a kernel TCP socket's writes, from the kernel's transmit timestamps (`SO_TIMESTAMPING`,
//! Documentation/networking/timestamping.rst): for the last byte of each write, the time it was handed to the
//! device queue (`TX_SCHED`) and the time the peer's cumulative ACK covered it (`TX_ACK`). Their difference is the
//! round trip of that byte alone, which ALCC's controllers need where `TCP_INFO` offers only a smoothed RTT fed by
//! the oldest segment of each ACK.
#![allow(unsafe_code)] // recvmsg on the error queue and its control messages; see also sockopt.rs and ifaddrs.rs.

use std::collections::VecDeque;
use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

// include/uapi/linux/errqueue.h: what a timestamp reports (`ee_info`).
const SCM_TSTAMP_SCHED: u32 = 1;
const SCM_TSTAMP_ACK: u32 = 2;

/// Writes whose last byte left and is not yet acknowledged, bounded so that timestamps the kernel never completes
/// (a byte whose skb was merged with a later write's) cannot pile up.
const MAX_OUTSTANDING: usize = 4096;

/// Most timestamp messages drained in one call, so that a flood cannot hold the caller.
const MAX_MESSAGES_PER_DRAIN: usize = 1024;

/// The transmit timestamps of one TCP socket.
#[derive(Debug, Default)]
pub struct WriteRoundTrips {
    /// Writes in the order they left: (the kernel's id of the write's last byte, when it left).
    outstanding: VecDeque<(u32, Duration)>,
}

impl WriteRoundTrips {
    /// Asks the kernel to timestamp the last byte of every later write on `socket` when it leaves and when it is
    /// acknowledged, the reports queued on the socket's error queue without the packet's bytes.
    pub fn enable(socket: &impl AsRawFd) -> io::Result<WriteRoundTrips> {
        let flags = libc::SOF_TIMESTAMPING_TX_SCHED
            | libc::SOF_TIMESTAMPING_TX_ACK
            | libc::SOF_TIMESTAMPING_SOFTWARE
            | libc::SOF_TIMESTAMPING_OPT_ID
            | libc::SOF_TIMESTAMPING_OPT_TSONLY;
        crate::sockopt::setsockopt(socket, libc::SOL_SOCKET, libc::SO_TIMESTAMPING, &(flags as libc::c_int))?;
        Ok(WriteRoundTrips::default())
    }

    /// Reads the timestamps queued since the last call and returns the round trips of the writes acknowledged
    /// meanwhile, oldest first. Never blocks.
    pub fn drain(&mut self, socket: &impl AsRawFd) -> io::Result<Vec<Duration>> {
        let mut round_trips = Vec::new();
        for _ in 0..MAX_MESSAGES_PER_DRAIN {
            let Some(report) = read_report(socket)? else { break };
            if let Some(rtt) = self.on_report(report) {
                round_trips.push(rtt);
            }
        }
        Ok(round_trips)
    }

    fn on_report(&mut self, report: Report) -> Option<Duration> {
        match report.kind {
            SCM_TSTAMP_SCHED => {
                if self.outstanding.len() == MAX_OUTSTANDING {
                    self.outstanding.pop_front();
                }
                self.outstanding.push_back((report.id, report.at));
                None
            }
            SCM_TSTAMP_ACK => {
                // ACKs are cumulative: writes before this one that got no report of their own are done too.
                let position = self.outstanding.iter().position(|&(id, _)| id == report.id)?;
                let (_, left) = self.outstanding[position];
                self.outstanding.drain(..=position);
                report.at.checked_sub(left)
            }
            _ => None,
        }
    }
}

/// One timestamp from the error queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Report {
    kind: u32,
    /// The id of the write's last byte (a byte counter since timestamping was enabled, wrapping at 2^32).
    id: u32,
    /// Software timestamp, CLOCK_REALTIME: only differences of two are used.
    at: Duration,
}

/// Reads one message from the error queue; `None` when it is empty. Messages that are not transmit timestamps (a
/// real socket error is reported by the next write or read instead) are skipped.
fn read_report(socket: &impl AsRawFd) -> io::Result<Option<Report>> {
    loop {
        // u64 elements align the buffer for cmsghdr.
        let mut control = [0u64; 64];
        // SAFETY: msghdr is plain data; all-zero is a valid value (no name, no iovec), filled in below.
        let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
        message.msg_control = control.as_mut_ptr().cast();
        message.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: `message` points at `control`, which outlives the call; there is no iovec to write to.
        let rc = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut message, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
        if rc < 0 {
            let error = io::Error::last_os_error();
            return match error.kind() {
                io::ErrorKind::WouldBlock => Ok(None),
                io::ErrorKind::Interrupted => continue,
                _ => Err(error),
            };
        }
        if let Some(report) = parse_control(&message) {
            return Ok(Some(report));
        }
    }
}

/// The timestamp and its description from one error-queue message's control messages.
fn parse_control(message: &libc::msghdr) -> Option<Report> {
    let mut at = None;
    let mut described = None;
    // SAFETY: `message` was filled by recvmsg: its control buffer and length describe valid control messages, and
    // CMSG_NXTHDR stops at the buffer's end; each payload is read unaligned with the size the kernel wrote.
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(message);
        while let Some(cmsg) = header.as_ref() {
            let data = libc::CMSG_DATA(cmsg);
            // cmsg_len counts the header; a kernel never writes one shorter, but saturate rather than wrap.
            let payload = cmsg.cmsg_len.saturating_sub(data as usize - std::ptr::from_ref(cmsg) as usize);
            match (cmsg.cmsg_level, cmsg.cmsg_type) {
                (libc::SOL_SOCKET, libc::SO_TIMESTAMPING) if payload >= std::mem::size_of::<[libc::timespec; 3]>() => {
                    // struct scm_timestamping: the software timestamp is the first of three.
                    let software = data.cast::<libc::timespec>().read_unaligned();
                    at = Some(Duration::new(software.tv_sec as u64, software.tv_nsec as u32));
                }
                (libc::SOL_IP, libc::IP_RECVERR) | (libc::SOL_IPV6, libc::IPV6_RECVERR)
                    if payload >= std::mem::size_of::<libc::sock_extended_err>() =>
                {
                    let error = data.cast::<libc::sock_extended_err>().read_unaligned();
                    if error.ee_errno == libc::ENOMSG as u32 && error.ee_origin == libc::SO_EE_ORIGIN_TIMESTAMPING {
                        described = Some((error.ee_info, error.ee_data));
                    }
                }
                _ => {}
            }
            header = libc::CMSG_NXTHDR(message, cmsg);
        }
    }
    let (kind, id) = described?;
    Some(Report { kind, id, at: at? })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    fn report(kind: u32, id: u32, ms: u64) -> Report {
        Report { kind, id, at: Duration::from_millis(ms) }
    }

    #[test]
    fn a_round_trip_runs_from_when_the_last_byte_left_to_its_ack() {
        let mut trips = WriteRoundTrips::default();
        assert_eq!(trips.on_report(report(SCM_TSTAMP_SCHED, 999, 100)), None);
        assert_eq!(trips.on_report(report(SCM_TSTAMP_SCHED, 1999, 105)), None);
        assert_eq!(trips.on_report(report(SCM_TSTAMP_SCHED, 2999, 110)), None);
        assert_eq!(trips.on_report(report(SCM_TSTAMP_ACK, 999, 140)), Some(Duration::from_millis(40)));
        // The write ending at 1999 got no ACK report of its own: the next ACK covers it.
        assert_eq!(trips.on_report(report(SCM_TSTAMP_ACK, 2999, 160)), Some(Duration::from_millis(50)));
        assert!(trips.outstanding.is_empty());
        assert_eq!(trips.on_report(report(SCM_TSTAMP_ACK, 2999, 170)), None, "an id not outstanding is no sample");
    }

    #[test]
    fn writes_that_never_complete_are_bounded() {
        let mut trips = WriteRoundTrips::default();
        for id in 0..(MAX_OUTSTANDING as u32 + 10) {
            trips.on_report(report(SCM_TSTAMP_SCHED, id, 1));
        }
        assert_eq!(trips.outstanding.len(), MAX_OUTSTANDING);
        assert_eq!(trips.outstanding.front().map(|&(id, _)| id), Some(10));
    }

    #[test]
    fn loopback_writes_report_their_round_trips() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        let mut trips = WriteRoundTrips::enable(&client).unwrap();
        let mut samples = Vec::new();
        let mut buf = vec![0u8; 10_000];
        for _ in 0..5 {
            client.write_all(&buf).unwrap();
            server.read_exact(&mut buf).unwrap();
            // The ACK may trail the read: wait for this write's report.
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            let before = samples.len();
            while samples.len() == before && std::time::Instant::now() < deadline {
                samples.extend(trips.drain(&client).unwrap());
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        assert_eq!(samples.len(), 5, "one round trip per write: {samples:?}");
        assert!(samples.iter().all(|rtt| *rtt < Duration::from_secs(1)), "{samples:?}");
        assert!(trips.outstanding.is_empty(), "{:?}", trips.outstanding);
    }
}
