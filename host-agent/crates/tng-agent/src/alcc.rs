//! The ALCC writer of one kernel TCP socket: reads TCP_INFO into `tng_proto::alcc::AlccSender` and applies its
//! decisions (how much to write, the pacing cap) to the socket. The logic lives in tng-proto; this is the IO, shared
//! by the perf server's TCP sender and `tng proxy`'s writes to its TCP clients; and the receiving side's clock for
//! Sprout's forecasts (`AlccClient`, the perf client's).

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tng_proto::alcc::{needs_receiver, AlccReceiver, AlccSender, AlccStats, ALCC_KINDS};
use tng_proto::cc::DeliveryForecast;
use tng_proto::{CcKind, Time};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::sockopt;

/// Longest the sender goes without reading the kernel's state while it has data to send: the ACKs it reads
/// arrive on the kernel's schedule, so the controller hears of them at most this late.
pub const POLL_INTERVAL: Duration = Duration::from_millis(1);

/// Written bytes the kernel may hold unsent: small, so that what the controller allows goes out at once and what
/// it holds back stays in the application.
const NOTSENT_LOWAT: u32 = 16 * 1024;

/// Bytes `copy_governed` reads from its source at a time.
const COPY_CHUNK: usize = 64 * 1024;

/// A pacing cap changes when the controller's rate moved by more than 1/8 of it, not on every sample.
const PACING_CHANGE: u64 = 8;

/// ALCC on one kernel TCP socket.
pub struct AlccSocket {
    socket: OwnedFd,
    kind: CcKind,
    sender: AlccSender,
    started: Instant,
    pacing_cap: u64,
}

impl AlccSocket {
    /// Puts `socket` (a descriptor of the connection the data leaves on) under controller `kind`.
    pub fn new(socket: OwnedFd, kind: CcKind) -> Result<AlccSocket> {
        let info = sockopt::alcc_tcp_info(&socket).context("cannot read TCP_INFO")?;
        let sender = AlccSender::new(kind, info.snd_mss, Time::ZERO)?;
        sockopt::set_notsent_lowat(&socket, NOTSENT_LOWAT).context("cannot set TCP_NOTSENT_LOWAT")?;
        let mut alcc = AlccSocket { socket, kind, sender, started: Instant::now(), pacing_cap: 0 };
        alcc.sender.on_tcp_info(Time::ZERO, &info);
        Ok(alcc)
    }

    /// Reads the kernel's state, feeds it to the controller, updates the pacing cap, and returns how many of the
    /// `pending` bytes may be written now: the controller's allowance, in whole segments.
    pub fn writable(&mut self, pending: usize) -> Result<usize> {
        let info = sockopt::alcc_tcp_info(&self.socket).context("cannot read TCP_INFO")?;
        let now = Time::ZERO + self.started.elapsed();
        self.sender.on_tcp_info(now, &info);
        let rate = self.sender.pacing_rate();
        if rate.abs_diff(self.pacing_cap) > self.pacing_cap / PACING_CHANGE {
            sockopt::set_max_pacing_rate(&self.socket, rate).context("cannot set SO_MAX_PACING_RATE")?;
            self.pacing_cap = rate;
        }
        Ok(usize::try_from(self.sender.allowance()).unwrap_or(usize::MAX).min(pending))
    }

    /// The most bytes within `bytes` that fill whole segments.
    pub fn whole_segments(&self, bytes: usize) -> usize {
        usize::try_from(self.sender.whole_segments(bytes as u64)).unwrap_or(bytes)
    }

    /// `bytes` were written to the socket.
    pub fn wrote(&mut self, bytes: usize) {
        self.sender.on_written(bytes as u64);
    }

    pub fn stats(&self) -> AlccStats {
        self.sender.stats()
    }

    /// Whether the controller runs on the receiver's forecasts (Sprout), which the caller must read from the
    /// connection and pass to [`AlccSocket::on_forecast`].
    pub fn wants_forecasts(&self) -> bool {
        needs_receiver(self.kind)
    }

    pub fn on_forecast(&mut self, forecast: &DeliveryForecast) {
        let now = Time::ZERO + self.started.elapsed();
        self.sender.on_delivery_forecast(now, forecast);
    }
}

/// The receiving application's half of ALCC for Sprout: counts what it reads and says when to send a forecast, and
/// has its kernel acknowledge at once.
///
/// The sender learns whether its packets found a queue from the kernel's smoothed RTT, whose samples come from the
/// oldest segment each ACK covers. At Sprout's two-segment minimum the sender paces its segments a quarter RTT
/// apart, so a delayed ACK holds the first until the second arrives and every sample shows that wait as a queue:
/// Sprout never probed its way out after the trace's dip (4.1 Mbit/s of 7.8, where it reached 7.5 with exact RTTs).
/// TCP_QUICKACK after each read sends any delayed ACK at once (Linux falls back to delaying on its own, hence each
/// read).
pub struct AlccClient {
    receiver: AlccReceiver,
    socket: OwnedFd,
    started: Instant,
}

impl AlccClient {
    /// For the connection `socket`: segments are counted in its MSS (the link's, in both directions here).
    pub fn new(socket: &OwnedFd) -> Result<AlccClient> {
        let info = sockopt::alcc_tcp_info(socket).context("cannot read TCP_INFO")?;
        Ok(AlccClient {
            receiver: AlccReceiver::new(info.snd_mss, Time::ZERO),
            socket: socket.try_clone().context("cannot duplicate the socket")?,
            started: Instant::now(),
        })
    }

    /// `bytes` were read just now (0: none, the forecast's time came).
    pub fn on_read(&mut self, bytes: usize) -> Result<()> {
        let now = self.now();
        self.receiver.on_read(now, bytes as u64);
        if bytes > 0 {
            sockopt::quick_ack(&self.socket).context("cannot set TCP_QUICKACK")?;
        }
        Ok(())
    }

    /// The forecast message to send now, if one is due.
    pub fn poll_message(&mut self) -> Option<Vec<u8>> {
        let now = self.now();
        self.receiver.poll_message(now)
    }

    /// When the next forecast is due.
    pub fn next_forecast_at(&self) -> Instant {
        self.started + self.receiver.next_forecast_at().saturating_since(Time::ZERO)
    }

    fn now(&self) -> Time {
        Time::ZERO + self.started.elapsed()
    }
}

/// `kind`, if ALCC runs it over kernel TCP; else why not, for an `--alcc` flag.
pub fn supported(kind: CcKind) -> Result<CcKind> {
    if ALCC_KINDS.contains(&kind) {
        return Ok(kind);
    }
    bail!(
        "--alcc: {kind} is not one of the delay-based controllers ALCC runs over kernel TCP ({})",
        ALCC_KINDS.map(CcKind::name).join(", ")
    )
}

/// `kind`, if ALCC runs it for TCP clients that run nothing of tng (`tng proxy`'s); else why not.
pub fn supported_for_unmodified_clients(kind: CcKind) -> Result<CcKind> {
    let kind = supported(kind)?;
    if needs_receiver(kind) {
        bail!(
            "--alcc: {kind} needs forecasts from the receiving application (ALCC's client+server mode, as `tng perf \
             client --transport tcp --alcc {kind}` runs it), and the proxy's TCP clients send none"
        );
    }
    Ok(kind)
}

/// Writes part of `buf` to `writer`: as much as `alcc` allows after reading the kernel's state, or whatever the
/// writer takes without a controller. While the controller holds everything back, or the socket takes nothing, it
/// returns 0 after [`POLL_INTERVAL`] so that the caller reads the kernel's state again. Cancel-safe: dropped, it
/// wrote nothing.
pub async fn write_governed(
    writer: &mut (impl AsyncWrite + Unpin),
    buf: &[u8],
    alcc: Option<&mut AlccSocket>,
) -> Result<usize> {
    let Some(alcc) = alcc else { return took(writer.write(buf).await) };
    let allowed = alcc.writable(buf.len())?;
    if allowed == 0 {
        tokio::time::sleep(POLL_INTERVAL).await;
        return Ok(0);
    }
    tokio::select! {
        // `write` is cancel-safe: either it wrote `n` bytes or nothing.
        written = writer.write(&buf[..allowed]) => {
            let written = took(written)?;
            alcc.wrote(written);
            Ok(written)
        }
        () = tokio::time::sleep(POLL_INTERVAL) => Ok(0),
    }
}

/// The bytes a write took; none of a non-empty buffer means the peer can take no more.
fn took(written: std::io::Result<usize>) -> Result<usize> {
    match written? {
        0 => bail!("the socket takes no more bytes"),
        written => Ok(written),
    }
}

/// Copies `reader` into `writer` through [`write_governed`] until the reader ends, then shuts the writer down;
/// returns the bytes copied.
pub async fn copy_governed(
    reader: &mut (impl AsyncRead + Unpin),
    writer: &mut (impl AsyncWrite + Unpin),
    mut alcc: Option<&mut AlccSocket>,
) -> Result<u64> {
    let mut buf = vec![0u8; COPY_CHUNK];
    let mut copied = 0u64;
    loop {
        let read = reader.read(&mut buf).await?;
        if read == 0 {
            break;
        }
        let mut pos = 0;
        while pos < read {
            pos += write_governed(writer, &buf[pos..read], alcc.as_deref_mut()).await?;
        }
        copied += read as u64;
    }
    writer.shutdown().await?;
    Ok(copied)
}
