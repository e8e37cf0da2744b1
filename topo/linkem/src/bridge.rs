//! The I/O driver: one thread per direction reads frames from the ingress interface, runs them through that
//! direction's `Link` and writes them to the egress interface when they are due.
//!
//! Timing: timestamps come from CLOCK_MONOTONIC (`Clock`). The thread sleeps in `ppoll` (with a 1 ns timer slack)
//! until the next deadline, so frames leave one scheduler wake-up after it (tens of microseconds on an idle machine).
//! It does not spin: spinning bought microseconds at a quarter of a core per 10 Mbit/s, taken from the switch and
//! the endpoints that share the machine, whose own delays it then inflated by milliseconds. Departures stay exact:
//! `Link` schedules them from the ideal times, so a late wake-up never shifts the next one. On a machine busy with
//! other work a wake-up can wait for a CPU for milliseconds: run linkem under `chrt -f 10` there (docs/linkem.md).

use std::io::{self, Read, Write};
use std::num::NonZeroU64;
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::time::{clock_gettime, ClockId};

use crate::checksum::complete_transport_checksum;
use crate::counters::{add, DirectionCounters};
use crate::link::{ip_bytes, Link, RandomStreams};
use crate::packet_socket::{PacketSocket, Received, TransportChecksum};
use crate::spec::LinkSpec;

/// Longest sleep, so the kernel drop counter is read regularly even on an idle link.
const MAX_SLEEP_NS: u64 = 100_000_000;
/// Frames read per wake-up before due frames are sent again, so a flood cannot delay departures.
const RECEIVE_BATCH: usize = 64;
/// Large enough for any frame the kernel can hand over with offloads on (they should be off, see docs).
const RECEIVE_BUFFER_BYTES: usize = 256 * 1024;

/// Nanoseconds on CLOCK_MONOTONIC since the bridge started: the time base of every `Link`.
///
/// Read with `clock_gettime` rather than through `Instant`, so that an instant can be handed to other processes as a
/// CLOCK_MONOTONIC reading (what Python's `time.monotonic()` returns on Linux).
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    origin_monotonic_ns: u64,
}

fn monotonic_now_ns() -> u64 {
    let now = clock_gettime(ClockId::Monotonic);
    // CLOCK_MONOTONIC never reads negative.
    (now.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(now.tv_nsec as u64)
}

impl Clock {
    pub fn start() -> Clock {
        Clock { origin_monotonic_ns: monotonic_now_ns() }
    }

    pub fn now_ns(&self) -> u64 {
        monotonic_now_ns().saturating_sub(self.origin_monotonic_ns)
    }

    /// The CLOCK_MONOTONIC reading of an instant of this clock.
    pub fn monotonic_ns(&self, clock_ns: u64) -> u64 {
        self.origin_monotonic_ns.saturating_add(clock_ns)
    }
}

/// What the control socket asks of a forwarding thread.
#[derive(Debug)]
pub(crate) enum Update {
    /// Switch to this spec now (`Link::reconfigure`).
    Spec(LinkSpec),
    /// Start over at `origin_ns` with the random streams of `seed` (`Link::reset`), then send the direction's name
    /// on `applied`.
    Reset { origin_ns: u64, seed: u64, applied: mpsc::Sender<&'static str> },
}

/// The control side of one direction: sends new specs and resets to its thread and reads its counters.
#[derive(Debug)]
pub struct DirectionHandle {
    updates: mpsc::Sender<Update>,
    wake: UnixStream,
    pub counters: Arc<DirectionCounters>,
}

impl DirectionHandle {
    /// Hands a new spec to the forwarding thread and wakes it so the change applies at once.
    pub fn apply(&self, spec: LinkSpec) -> io::Result<()> {
        self.send(Update::Spec(spec))
    }

    /// Asks the forwarding thread to start the link over at `origin_ns` with the random streams of `seed`; it sends
    /// its direction's name on `applied` once done.
    pub fn reset(&self, origin_ns: u64, seed: u64, applied: mpsc::Sender<&'static str>) -> io::Result<()> {
        self.send(Update::Reset { origin_ns, seed, applied })
    }

    fn send(&self, update: Update) -> io::Result<()> {
        self.updates.send(update).map_err(|_| io::Error::other("the forwarding thread has stopped"))?;
        match (&self.wake).write(&[1]) {
            // A full wake socket means a wake-up is already pending.
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => Ok(()),
            other => other.map(drop),
        }
    }
}

/// One direction's forwarding loop and everything it owns.
pub struct Forwarder {
    name: &'static str,
    ingress: PacketSocket,
    egress: PacketSocket,
    link: Link,
    streams: RandomStreams,
    clock: Clock,
    updates: mpsc::Receiver<Update>,
    wake: UnixStream,
    counters: Arc<DirectionCounters>,
    /// Whether the one-time warnings about partial checksums were printed: completed ones, and ones that could not be.
    warned_partial: bool,
    warned_not_completed: bool,
}

/// Opens the sockets of one direction (frames read on `ingress`, written to `egress`); its loss and jitter draw
/// from `streams` seeded with `seed`.
pub fn direction(
    name: &'static str,
    ingress: &str,
    egress: &str,
    spec: LinkSpec,
    streams: RandomStreams,
    seed: u64,
    clock: Clock,
) -> io::Result<(Forwarder, DirectionHandle)> {
    let ingress = PacketSocket::receiver(ingress)?;
    let egress = PacketSocket::sender(egress)?;
    let (wake_sender, wake_receiver) = UnixStream::pair()?;
    wake_sender.set_nonblocking(true)?;
    wake_receiver.set_nonblocking(true)?;
    let (updates_sender, updates_receiver) = mpsc::channel();
    let counters = Arc::new(DirectionCounters::default());
    let link = Link::new(spec, streams.seeded(seed), clock.now_ns(), Arc::clone(&counters));
    let forwarder = Forwarder {
        name,
        ingress,
        egress,
        link,
        streams,
        clock,
        updates: updates_receiver,
        wake: wake_receiver,
        counters: Arc::clone(&counters),
        warned_partial: false,
        warned_not_completed: false,
    };
    let handle = DirectionHandle { updates: updates_sender, wake: wake_sender, counters };
    Ok((forwarder, handle))
}

impl Forwarder {
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Forwards until an interface disappears or a socket fails.
    pub fn run(mut self) -> io::Result<()> {
        // The default 50 us timer slack would add up to 50 us to every sleep; this thread wants its deadlines.
        let _ = rustix::thread::set_current_timer_slack(NonZeroU64::new(1));
        let mut buffer = vec![0u8; RECEIVE_BUFFER_BYTES];
        let mut next_statistics_ns = 0;
        loop {
            let now = self.clock.now_ns();
            self.send_due(now)?;
            self.apply_updates(now);
            if now >= next_statistics_ns {
                add(&self.counters.dropped_kernel, self.ingress.take_kernel_drops()?);
                next_statistics_ns = now + MAX_SLEEP_NS;
            }
            let until_deadline = self.link.next_deadline().map_or(u64::MAX, |deadline| deadline.saturating_sub(now));
            let sleep_ns = until_deadline.min(MAX_SLEEP_NS);
            if sleep_ns > 0 {
                self.sleep(sleep_ns)?;
                // A control update may have woken the thread: it applies to the frames read from now on, the ones
                // a client sends after its `set` was answered among them.
                self.apply_updates(self.clock.now_ns());
            }
            self.receive_batch(&mut buffer)?;
        }
    }

    fn apply_updates(&mut self, now: u64) {
        while let Ok(update) = self.updates.try_recv() {
            self.apply(update, now);
        }
    }

    fn apply(&mut self, update: Update, now: u64) {
        match update {
            Update::Spec(spec) => self.link.reconfigure(spec, now),
            Update::Reset { origin_ns, seed, applied } => {
                // The control thread chose the instant just before sending: this thread applies it at or after it.
                self.link.reset(origin_ns, self.streams.seeded(seed), now.max(origin_ns));
                // The control socket may have stopped waiting; the reset holds either way.
                let _ = applied.send(self.name);
            }
        }
    }

    /// Waits until a frame arrives, a control update is signalled, or `nanoseconds` pass.
    fn sleep(&mut self, nanoseconds: u64) -> io::Result<()> {
        let timeout = Duration::from_nanos(nanoseconds);
        let timeout = Timespec { tv_sec: timeout.as_secs() as _, tv_nsec: timeout.subsec_nanos() as _ };
        let mut fds = [PollFd::new(&self.ingress, PollFlags::IN), PollFd::new(&self.wake, PollFlags::IN)];
        match poll(&mut fds, Some(&timeout)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(error) => return Err(error.into()),
        }
        if fds[1].revents().contains(PollFlags::IN) {
            let mut drain = [0u8; 64];
            while matches!((&self.wake).read(&mut drain), Ok(n) if n > 0) {}
        }
        Ok(())
    }

    fn send_due(&mut self, now: u64) -> io::Result<()> {
        while let Some(frame) = self.link.pop_due(now) {
            match self.egress.send(&frame) {
                Ok(()) => {
                    add(&self.counters.forwarded_packets, 1);
                    add(&self.counters.forwarded_bytes, ip_bytes(&frame));
                }
                Err(error) if interface_gone(&error) => {
                    return Err(io::Error::new(
                        error.kind(),
                        format!("{}: sending on `{}`: {error}", self.name, self.egress.interface()),
                    ))
                }
                Err(_) => add(&self.counters.dropped_send, 1),
            }
        }
        Ok(())
    }

    fn receive_batch(&mut self, buffer: &mut [u8]) -> io::Result<()> {
        for _ in 0..RECEIVE_BATCH {
            let received = match self.ingress.receive(buffer) {
                Ok(received) => received,
                // The interface went down; its frames stop until it comes back up.
                Err(error) if error.raw_os_error() == Some(libc::ENETDOWN) => return Ok(()),
                Err(error) => {
                    return Err(io::Error::new(
                        error.kind(),
                        format!("{}: receiving on `{}`: {error}", self.name, self.ingress.interface()),
                    ))
                }
            };
            match received {
                Received::Frame { length, checksum } => {
                    let mut frame = buffer[..length].to_vec();
                    if let TransportChecksum::Partial { network_offset } = checksum {
                        self.complete_checksum(&mut frame, network_offset);
                    }
                    let now = self.clock.now_ns();
                    self.link.arrive(now, frame);
                }
                Received::Oversized(_) => add(&self.counters.dropped_oversize, 1),
                Received::Outgoing => {}
                Received::Nothing => return Ok(()),
            }
        }
        Ok(())
    }

    /// Completes the TCP or UDP checksum the sender left to offload; without this the receiving host would drop the
    /// frame (TCP would never connect). Says so once per direction, with the fix at the source.
    fn complete_checksum(&mut self, frame: &mut [u8], network_offset: usize) {
        let ingress = self.ingress.interface();
        match complete_transport_checksum(frame, network_offset) {
            Ok(_) => add(&self.counters.checksum_completed, 1),
            Err(reason) if !self.warned_not_completed => {
                self.warned_not_completed = true;
                eprintln!(
                    "linkem: {}: a frame from `{ingress}` with a partial checksum was forwarded as it came ({reason}); \
                     its receiver will drop it",
                    self.name
                );
            }
            Err(_) => {}
        }
        if !self.warned_partial {
            self.warned_partial = true;
            eprintln!(
                "linkem: {}: frames from `{ingress}` carry partial TCP/UDP checksums (the sender's transmit checksum \
                 offload is on); linkem completes them (counter checksum_completed). Fix at the source: \
                 `ethtool -K IFACE tx off` on the interface that sends into `{ingress}` (for a veth, its peer)",
                self.name
            );
        }
    }
}

fn interface_gone(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::ENXIO) | Some(libc::ENODEV))
}

/// A handle whose forwarding side is the returned receiver, for testing the control protocol without sockets.
#[cfg(test)]
pub(crate) fn detached_handle() -> (DirectionHandle, mpsc::Receiver<Update>, UnixStream) {
    let (wake_sender, wake_receiver) = UnixStream::pair().expect("socket pair");
    wake_sender.set_nonblocking(true).expect("nonblocking");
    let (updates, receiver) = mpsc::channel();
    let handle = DirectionHandle { updates, wake: wake_sender, counters: Arc::new(DirectionCounters::default()) };
    (handle, receiver, wake_receiver)
}
