//! The ALCC driver of one kernel TCP socket: reads TCP_INFO into `tng_proto::alcc::AlccSender` and applies its
//! decisions (how much to write, the pacing cap) to the socket. The logic lives in tng-proto; this is the IO.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tng_proto::alcc::{AlccSender, AlccStats};
use tng_proto::{CcKind, Time};

use crate::sockopt;

/// Longest the sender goes without reading the kernel's state while it has data to send: the ACKs it reads
/// arrive on the kernel's schedule, so the controller hears of them at most this late.
pub const POLL_INTERVAL: Duration = Duration::from_millis(1);

/// Written bytes the kernel may hold unsent: small, so that what the controller allows goes out at once and what
/// it holds back stays in the application.
const NOTSENT_LOWAT: u32 = 16 * 1024;

/// A pacing cap changes when the controller's rate moved by more than 1/8 of it, not on every sample.
const PACING_CHANGE: u64 = 8;

/// ALCC on one kernel TCP socket.
pub struct AlccSocket {
    socket: OwnedFd,
    sender: AlccSender,
    mss: u64,
    started: Instant,
    pacing_cap: u64,
}

impl AlccSocket {
    /// Puts `socket` (a descriptor of the connection the data leaves on) under controller `kind`.
    pub fn new(socket: OwnedFd, kind: CcKind) -> Result<AlccSocket> {
        let info = sockopt::alcc_tcp_info(&socket).context("cannot read TCP_INFO")?;
        let sender = AlccSender::new(kind, info.snd_mss, Time::ZERO)?;
        sockopt::set_notsent_lowat(&socket, NOTSENT_LOWAT).context("cannot set TCP_NOTSENT_LOWAT")?;
        let mut alcc =
            AlccSocket { socket, sender, mss: u64::from(info.snd_mss.max(1)), started: Instant::now(), pacing_cap: 0 };
        alcc.sender.on_tcp_info(Time::ZERO, &info);
        Ok(alcc)
    }

    /// Reads the kernel's state, feeds it to the controller, updates the pacing cap, and returns how many of the
    /// `pending` bytes may be written now: zero rather than a sliver of a segment while more is pending.
    pub fn writable(&mut self, pending: usize) -> Result<usize> {
        let info = sockopt::alcc_tcp_info(&self.socket).context("cannot read TCP_INFO")?;
        let now = Time::ZERO + self.started.elapsed();
        self.sender.on_tcp_info(now, &info);
        let rate = self.sender.pacing_rate();
        if rate.abs_diff(self.pacing_cap) > self.pacing_cap / PACING_CHANGE {
            sockopt::set_max_pacing_rate(&self.socket, rate).context("cannot set SO_MAX_PACING_RATE")?;
            self.pacing_cap = rate;
        }
        let allowance = usize::try_from(self.sender.allowance()).unwrap_or(usize::MAX);
        let smallest = usize::try_from(self.mss).unwrap_or(usize::MAX).min(pending);
        Ok(if allowance >= smallest { allowance.min(pending) } else { 0 })
    }

    /// `bytes` were written to the socket.
    pub fn wrote(&mut self, bytes: usize) {
        self.sender.on_written(bytes as u64);
    }

    pub fn stats(&self) -> AlccStats {
        self.sender.stats()
    }
}
