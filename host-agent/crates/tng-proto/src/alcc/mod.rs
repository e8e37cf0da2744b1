//! ALCC (Zaki et al., "ALCC: migrating congestion control to the application layer in cellular networks") over
//! kernel TCP: a tng controller decides how much a kernel TCP socket may carry; the kernel's own controller still
//! runs underneath.
//!
//! The kernel already acknowledges, times and retransmits; the sender reads that state from `TCP_INFO` and hands the
//! same controller object tng uses ([`crate::cc::new_controller`]) the events its flow layer would: bytes sent,
//! bytes acknowledged with an RTT sample, bytes lost. The application then writes only the window minus what the
//! kernel holds (in flight and not yet sent), so the kernel's larger window never fills: ALCC's design, without its
//! kernel module. Sans-IO: the driver reads the socket and passes `now`.
//!
//! What TCP_INFO cannot tell, and how the adapter stands in for it:
//! - Per-ACK RTT samples: the kernel exposes only its smoothed RTT (gain 1/8 per ACK, each sample from the *oldest*
//!   segment an ACK covers) and its windowed minimum, so a controller fed the smoothed RTT sees queueing several
//!   ACKs late (ALCC Copa kept 10-15 % more delay than tng Copa that way). The sender times round trips itself from
//!   the byte counters instead ([`SentMarks`]): when the kernel's count of data sent first passed an offset, and
//!   when its count of bytes acknowledged did, each as of the state read first after it. The driver reads the state
//!   at least every millisecond while it sends, so a sample is exact to about that. A retransmission in between
//!   makes the sample ambiguous (Karn): such ACKs, and ACKs that cover no new mark, carry the smoothed RTT. Transmit
//!   timestamps (SO_TIMESTAMPING's TX_ACK) would be exact, but their error queue wakes the writer's task on every
//!   ACK and kept it busy (tried: 61-82 % of a core for ALCC Verus, against 2 %).
//! - Send times of lost bytes: one RTT before the retransmission was counted.
//!
//! Sprout needs its receiver's forecasts, which a TCP receiver does not send: it runs only where the receiving
//! application runs [`AlccReceiver`] and sends them back (ALCC's client+server mode, [`receiver`]).

pub mod receiver;

use std::time::Duration;

pub use receiver::{AlccReceiver, BadForecastMessage, ForecastMessages};

use std::collections::VecDeque;

use crate::cc::{new_controller, AckSample, CcConfig, CcKind, CongestionController, DeliveryForecast, LossEvent};
use crate::time::Time;

/// The `struct tcp_info` fields the adapter reads, as the kernel reports them at one moment (counters are
/// cumulative since the connection opened). The byte counters need Linux 4.19 or later.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpInfoSample {
    /// `tcpi_snd_mss`: the sender's segment size in bytes.
    pub snd_mss: u32,
    /// `tcpi_sacked`: of those, segments selectively acknowledged.
    pub sacked: u32,
    /// `tcpi_lost`: of those, segments marked lost and not yet retransmitted.
    pub lost: u32,
    /// `tcpi_retrans`: segments retransmitted and not yet acknowledged.
    pub retrans: u32,
    /// `tcpi_rtt`: the kernel's smoothed RTT, in microseconds.
    pub rtt_us: u32,
    /// `tcpi_min_rtt`: the kernel's windowed minimum RTT, in microseconds.
    pub min_rtt_us: u32,
    /// `tcpi_notsent_bytes`: bytes written by the application the kernel has not sent yet.
    pub notsent_bytes: u32,
    /// `tcpi_bytes_acked`: bytes cumulatively acknowledged (the SYN counts one).
    pub bytes_acked: u64,
    /// `tcpi_bytes_sent`: bytes sent, retransmissions included.
    pub bytes_sent: u64,
    /// `tcpi_bytes_retrans`: bytes retransmitted.
    pub bytes_retrans: u64,
    /// `tcpi_delivery_rate`: the kernel's latest delivery rate sample, bytes per second (0: none yet).
    pub delivery_rate: u64,
}

impl TcpInfoSample {
    /// Bytes in the network, as the kernel's `tcp_packets_in_flight` counts them but in bytes: those sent and not
    /// cumulatively acknowledged (`snd_nxt - snd_una`, exact even when segments are shorter than the MSS), less the
    /// segments selectively acknowledged or lost and not yet retransmitted.
    pub fn in_flight_bytes(&self) -> u64 {
        let unacked = self.bytes_sent.saturating_sub(self.bytes_retrans).saturating_sub(self.bytes_acked);
        let left_network = (u64::from(self.sacked) + u64::from(self.lost)).saturating_sub(u64::from(self.retrans));
        unacked.saturating_sub(left_network * u64::from(self.snd_mss))
    }

    fn srtt(&self) -> Duration {
        Duration::from_micros(u64::from(self.rtt_us))
    }

    fn min_rtt(&self) -> Duration {
        Duration::from_micros(u64::from(self.min_rtt_us))
    }
}

/// An ALCC controller name that cannot run over kernel TCP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnsupportedAlcc(pub CcKind);

impl std::fmt::Display for UnsupportedAlcc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} cannot run over kernel TCP: ALCC runs the delay-based controllers {} (sprout only with a receiver \
             that sends its forecasts)",
            self.0,
            ALCC_KINDS.map(CcKind::name).join(", ")
        )
    }
}

impl std::error::Error for UnsupportedAlcc {}

/// The controllers ALCC runs over kernel TCP: the delay-based ones. Copa and Verus need nothing but the kernel's
/// ACK state; Sprout also needs the receiver's forecasts ([`needs_receiver`]).
pub const ALCC_KINDS: [CcKind; 3] = [CcKind::Copa, CcKind::Verus, CcKind::Sprout];

/// Whether `kind` works only with a receiving application that runs [`AlccReceiver`]: an unmodified TCP client
/// sends nothing it could use.
pub fn needs_receiver(kind: CcKind) -> bool {
    kind.uses_delivery_forecast()
}

/// Peaks over a connection, so a run can show that the controller's window bounded the kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AlccStats {
    /// Kernel states read.
    pub samples: u64,
    /// Largest window the controller set.
    pub peak_window: u64,
    /// Largest number of bytes the kernel had in flight or queued unsent.
    pub peak_kernel_bytes: u64,
    /// Forecasts from the receiver the controller took (Sprout's).
    pub forecasts: u64,
    /// ACKs the controller heard with a round trip the sender timed ([`SentMarks`]) rather than the smoothed RTT.
    pub round_trips: u64,
}

/// Most send marks kept: one per state read that saw new data sent, so at least a window's worth of reads (a second
/// of them at the driver's millisecond); beyond it the oldest go, and the ACKs that cover them carry the smoothed RTT.
const MAX_SENT_MARKS: usize = 4096;

/// When the kernel was first seen to have sent data up to an offset, and its retransmission count then.
#[derive(Clone, Copy, Debug)]
struct SentMark {
    /// Data bytes sent (`bytes_sent - bytes_retrans`), the offset the mark ends at.
    end: u64,
    seen: Time,
    bytes_retrans: u64,
}

/// Round trips timed from the kernel's byte counters: a mark when the data sent grows, a sample when the bytes
/// acknowledged pass a mark.
#[derive(Debug, Default)]
struct SentMarks {
    marks: VecDeque<SentMark>,
}

impl SentMarks {
    fn on_sent(&mut self, now: Time, info: &TcpInfoSample) {
        let end = info.bytes_sent.saturating_sub(info.bytes_retrans);
        if self.marks.back().is_none_or(|last| end > last.end) && end > info.bytes_acked {
            if self.marks.len() == MAX_SENT_MARKS {
                self.marks.pop_front();
            }
            self.marks.push_back(SentMark { end, seen: now, bytes_retrans: info.bytes_retrans });
        }
    }

    /// The round trip of the newest mark the acknowledged bytes now cover, unless a retransmission since it left
    /// makes the ACK ambiguous or it left in the same state (no time to measure).
    fn on_acked(&mut self, now: Time, info: &TcpInfoSample) -> Option<Duration> {
        let mut covered = None;
        while self.marks.front().is_some_and(|mark| mark.end <= info.bytes_acked) {
            covered = self.marks.pop_front();
        }
        let mark = covered.filter(|mark| mark.bytes_retrans == info.bytes_retrans)?;
        Some(now.saturating_since(mark.seen)).filter(|rtt| !rtt.is_zero())
    }
}

/// One TCP connection's application-level controller.
#[derive(Debug)]
pub struct AlccSender {
    controller: Box<dyn CongestionController>,
    /// The kernel's segment payload size: the allowance's unit.
    mss: u64,
    last: Option<TcpInfoSample>,
    /// Bytes in the kernel (in flight plus unsent) at the last sample, plus what was written since.
    kernel_bytes: u64,
    sent: SentMarks,
    stats: AlccStats,
}

impl AlccSender {
    /// A controller of `kind` for a connection whose segments carry `mss` bytes, started at `now`.
    pub fn new(kind: CcKind, mss: u32, now: Time) -> Result<AlccSender, UnsupportedAlcc> {
        if !ALCC_KINDS.contains(&kind) {
            return Err(UnsupportedAlcc(kind));
        }
        let mss = u64::from(mss.max(1));
        let config = CcConfig { max_datagram_size: mss, ..CcConfig::default() };
        let controller = new_controller(kind, &config, now);
        let stats = AlccStats { peak_window: controller.window(), ..AlccStats::default() };
        Ok(AlccSender { controller, mss, last: None, kernel_bytes: 0, sent: SentMarks::default(), stats })
    }

    /// Feeds the kernel's state at `now` to the controller as the events since the previous state: bytes
    /// acknowledged (one ACK carrying them all, with the round trip of the newest data they cover as its RTT sample,
    /// or the smoothed RTT where there is none), bytes retransmitted (a loss), bytes sent. The first state only sets
    /// the baseline.
    pub fn on_tcp_info(&mut self, now: Time, info: &TcpInfoSample) {
        let in_flight = info.in_flight_bytes();
        self.kernel_bytes = in_flight + u64::from(info.notsent_bytes);
        self.stats.samples += 1;
        self.stats.peak_kernel_bytes = self.stats.peak_kernel_bytes.max(self.kernel_bytes);
        self.sent.on_sent(now, info);
        let round_trip = self.sent.on_acked(now, info);
        let Some(last) = self.last.replace(*info) else { return };
        let srtt = info.srtt();
        let acked = info.bytes_acked.saturating_sub(last.bytes_acked);
        if acked > 0 && !srtt.is_zero() {
            if round_trip.is_some() {
                self.stats.round_trips += 1;
            }
            let rtt = round_trip.unwrap_or(srtt);
            let ack = AckSample {
                bytes_acked: acked,
                sent_time: now - rtt,
                rtt: Some(rtt),
                srtt,
                min_rtt: info.min_rtt(),
                delivery_rate: (info.delivery_rate > 0).then_some(info.delivery_rate),
                app_limited: false,
                bytes_in_flight: in_flight,
            };
            self.controller.on_ack(now, &ack);
        }
        let retransmitted = info.bytes_retrans.saturating_sub(last.bytes_retrans);
        if retransmitted > 0 {
            let loss = LossEvent {
                bytes_lost: retransmitted,
                largest_lost_sent_time: now - srtt,
                persistent: false,
                bytes_in_flight: in_flight,
            };
            self.controller.on_loss(now, &loss);
        }
        let sent = info.bytes_sent.saturating_sub(last.bytes_sent);
        if sent > 0 {
            self.controller.on_sent(now, sent, in_flight);
        }
        self.stats.peak_window = self.stats.peak_window.max(self.controller.window());
    }

    /// Bytes the application may write now: the window minus what the kernel holds (in flight and unsent) and what
    /// was written since the last state, rounded up to whole segments. The kernel sends each write at once
    /// (TCP_NODELAY), and a cellular link spends a delivery opportunity on every packet whatever its size, so a
    /// write cut at the exact window would end in a short packet that wastes most of one: cut that way, ALCC Copa's
    /// packets averaged 1223 bytes of 1448 and it used 82 % of the link. Rounding down instead would hold back a
    /// window under one segment's room for good (Sprout at its two-segment minimum), so the kernel may hold up to a
    /// segment less one byte beyond the window.
    pub fn allowance(&self) -> u64 {
        let room = self.controller.window().saturating_sub(self.kernel_bytes);
        room.div_ceil(self.mss).saturating_mul(self.mss)
    }

    /// The most bytes within `bytes` that fill whole segments.
    pub fn whole_segments(&self, bytes: u64) -> u64 {
        bytes - bytes % self.mss
    }

    /// The application wrote `bytes` to the socket.
    pub fn on_written(&mut self, bytes: u64) {
        self.kernel_bytes += bytes;
        self.stats.peak_kernel_bytes = self.stats.peak_kernel_bytes.max(self.kernel_bytes);
    }

    /// A forecast from the receiver's [`AlccReceiver`] arrived at `now`.
    pub fn on_delivery_forecast(&mut self, now: Time, forecast: &DeliveryForecast) {
        self.controller.on_delivery_forecast(now, forecast);
        self.stats.forecasts += 1;
        self.stats.peak_window = self.stats.peak_window.max(self.controller.window());
    }

    /// The rate to cap the kernel's pacing at (`SO_MAX_PACING_RATE`), bytes per second.
    pub fn pacing_rate(&self) -> u64 {
        let srtt = self.last.map_or(Duration::ZERO, |info| info.srtt());
        self.controller.pacing_rate(srtt)
    }

    pub fn window(&self) -> u64 {
        self.controller.window()
    }

    pub fn name(&self) -> &'static str {
        self.controller.name()
    }

    pub fn stats(&self) -> AlccStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u32 = 1448;

    fn at(ms: u64) -> Time {
        Time::from_millis(ms)
    }

    /// A connection that sent `sent` and had `acked` acknowledged, `rtt_ms` smoothed RTT, nothing lost.
    fn info(sent: u64, acked: u64, rtt_ms: u32) -> TcpInfoSample {
        TcpInfoSample {
            snd_mss: MSS,
            rtt_us: rtt_ms * 1000,
            min_rtt_us: 40_000,
            bytes_acked: acked,
            bytes_sent: sent,
            ..TcpInfoSample::default()
        }
    }

    #[test]
    fn in_flight_counts_what_the_kernel_counts_in_bytes() {
        // 10 segments of 1000 bytes and a 300-byte one out; 3 SACKed, 2 lost, 1 of those retransmitted.
        let out = TcpInfoSample {
            snd_mss: 1000,
            sacked: 3,
            lost: 2,
            retrans: 1,
            bytes_sent: 50_000 + 10_300 + 1000,
            bytes_retrans: 1000,
            bytes_acked: 50_000,
            ..TcpInfoSample::default()
        };
        assert_eq!(out.in_flight_bytes(), 10_300 - 4 * 1000);
        let short = info(50_300, 50_000, 40);
        assert_eq!(short.in_flight_bytes(), 300, "a short segment counts its bytes, not an MSS");
        let odd = TcpInfoSample { snd_mss: 1000, sacked: 3, ..info(1000, 0, 40) };
        assert_eq!(odd.in_flight_bytes(), 0, "a kernel race never makes in-flight negative");
    }

    #[test]
    fn loss_based_controllers_are_refused_with_the_reason() {
        let err = AlccSender::new(CcKind::Cubic, MSS, at(0)).unwrap_err();
        assert_eq!(err, UnsupportedAlcc(CcKind::Cubic));
        assert!(err.to_string().contains("copa, verus, sprout"), "{err}");
        assert!(AlccSender::new(CcKind::NewReno, MSS, at(0)).is_err());
        assert!(AlccSender::new(CcKind::Verus, MSS, at(0)).is_ok());
        assert!(needs_receiver(CcKind::Sprout) && !needs_receiver(CcKind::Copa) && !needs_receiver(CcKind::Verus));
    }

    #[test]
    fn sprouts_window_follows_the_receivers_forecasts() {
        let mut alcc = AlccSender::new(CcKind::Sprout, MSS, at(0)).unwrap();
        alcc.on_tcp_info(at(0), &info(0, 0, 40));
        // The receiver reads 1000 segments/s for a second (20 per tick), then nothing for a second.
        let mut receiver = AlccReceiver::new(MSS, at(0));
        let mut messages = ForecastMessages::default();
        let mut deliver = |alcc: &mut AlccSender, receiver: &mut AlccReceiver, now: Time| {
            for forecast in receiver.poll_message(now).map(|m| messages.push(&m).unwrap()).unwrap_or_default() {
                alcc.on_delivery_forecast(now, &forecast);
            }
        };
        for ms in 0..1000 {
            receiver.on_read(at(ms), u64::from(MSS));
            deliver(&mut alcc, &mut receiver, at(ms));
        }
        // Queueing ends the slow-start probe, so the window is the forecast's alone.
        let (mut sent, mut now) = (0u64, 1000u64);
        for _ in 0..3 {
            sent += 10_000;
            now += 80;
            alcc.on_tcp_info(at(now), &info(sent, sent, 80));
        }
        let busy = alcc.window();
        // The forecast over 100 ms + 40 ms of min RTT at 20 segments per 20 ms tick: at most 140 segments.
        assert!(busy > 40 * u64::from(MSS) && busy <= 140 * u64::from(MSS), "{busy}");
        for ms in 1240..2200 {
            deliver(&mut alcc, &mut receiver, at(ms));
        }
        alcc.on_tcp_info(at(2200), &info(sent, sent, 80));
        assert!(alcc.window() < busy / 4, "a silent link forecasts little: {} from {busy}", alcc.window());
        assert_eq!(alcc.name(), "sprout");
    }

    #[test]
    fn the_allowance_is_the_window_minus_what_the_kernel_holds() {
        let mut alcc = AlccSender::new(CcKind::Copa, MSS, at(0)).unwrap();
        let window = alcc.window();
        let mss = u64::from(MSS);
        assert_eq!(window % mss, 0, "Copa's initial window is whole segments");
        alcc.on_tcp_info(at(0), &info(0, 0, 0));
        assert_eq!(alcc.allowance(), window);
        alcc.on_written(5 * mss);
        assert_eq!(alcc.allowance(), window - 5 * mss);
        // The kernel sent 3 segments of it; the rest waits unsent.
        let sent = TcpInfoSample { notsent_bytes: 2 * MSS, ..info(3 * mss, 0, 0) };
        alcc.on_tcp_info(at(1), &sent);
        assert_eq!(alcc.allowance(), window - 5 * mss);
        alcc.on_written(100);
        assert_eq!(alcc.allowance(), window - 5 * mss, "room for part of a segment is room for a whole one");
        assert_eq!(alcc.whole_segments(5 * mss + 100), 5 * mss);
        alcc.on_written(window);
        assert_eq!(alcc.allowance(), 0, "never negative");
    }

    #[test]
    fn acknowledged_bytes_without_queueing_grow_the_window() {
        let mut alcc = AlccSender::new(CcKind::Copa, MSS, at(0)).unwrap();
        let initial = alcc.window();
        alcc.on_tcp_info(at(0), &info(0, 0, 40));
        let mut sent = 0;
        for round in 1..=5u64 {
            sent += alcc.allowance();
            alcc.on_written(alcc.allowance());
            alcc.on_tcp_info(at(round * 40 - 39), &info(sent, sent - alcc.window().min(sent), 40));
            alcc.on_tcp_info(at(round * 40), &info(sent, sent, 40));
        }
        assert!(alcc.window() >= 8 * initial, "slow start doubles per RTT: {} from {initial}", alcc.window());
        assert_eq!(alcc.stats().peak_window, alcc.window());
        assert_eq!(alcc.stats().samples, 11);
    }

    #[test]
    fn a_growing_rtt_stops_copas_growth_and_shrinks_its_window() {
        let mut alcc = AlccSender::new(CcKind::Copa, MSS, at(0)).unwrap();
        let (mut sent, mut now) = (0u64, 0u64);
        alcc.on_tcp_info(at(now), &info(0, 0, 40));
        // An RTT that rises 10 ms per round trip: a queue building at the bottleneck.
        for round in 0..20u32 {
            let rtt = 40 + 10 * round;
            now += u64::from(rtt);
            sent += alcc.allowance();
            alcc.on_written(alcc.allowance());
            alcc.on_tcp_info(at(now), &TcpInfoSample { min_rtt_us: 40_000, ..info(sent, sent, rtt) });
        }
        let peak = alcc.stats().peak_window;
        assert!(alcc.window() < peak, "the window fell from its peak {peak} as the queue grew: {}", alcc.window());
        assert_eq!(alcc.name(), "copa");
    }

    #[test]
    fn retransmitted_bytes_are_a_loss_that_cuts_verus_window_once_per_episode() {
        let mut alcc = AlccSender::new(CcKind::Verus, MSS, at(0)).unwrap();
        let mut sent = 0u64;
        alcc.on_tcp_info(at(0), &info(0, 0, 40));
        for round in 1..=6u64 {
            sent += alcc.allowance();
            alcc.on_written(alcc.allowance());
            alcc.on_tcp_info(at(round * 40), &info(sent, sent, 40));
        }
        let before = alcc.window();
        let retrans = |bytes: u64| TcpInfoSample { bytes_retrans: bytes, ..info(sent, sent, 40) };
        alcc.on_tcp_info(at(250), &retrans(u64::from(MSS)));
        let cut = alcc.window();
        assert!(cut < before, "a loss cuts the window: {before} -> {cut}");
        alcc.on_tcp_info(at(251), &retrans(2 * u64::from(MSS)));
        assert_eq!(alcc.window(), cut, "a second loss of the same episode does not cut again");
    }

    /// The round trips `SentMarks` times for states read at `polls` (ms, data bytes sent, bytes acknowledged).
    fn round_trips(polls: &[(u64, u64, u64)]) -> Vec<Option<u64>> {
        let mut marks = SentMarks::default();
        polls
            .iter()
            .map(|&(ms, sent, acked)| {
                let state = info(sent, acked, 99);
                marks.on_sent(at(ms), &state);
                marks.on_acked(at(ms), &state).map(|rtt| rtt.as_millis() as u64)
            })
            .collect()
    }

    #[test]
    fn a_round_trip_runs_from_the_state_that_first_showed_data_sent_to_the_one_that_showed_it_acknowledged() {
        let timed = round_trips(&[
            (0, 1000, 0),    // 1000 bytes out
            (5, 3000, 0),    // 2000 more
            (40, 3000, 999), // part of the first: no mark covered yet
            (41, 3000, 1000),
            (47, 4000, 3000),
            (60, 4000, 4000),
            (61, 4000, 4000), // nothing new
        ]);
        assert_eq!(timed, [None, None, None, Some(41), Some(42), Some(13), None]);
        // Data acknowledged in the state that first shows it sent cannot be timed.
        assert_eq!(round_trips(&[(0, 0, 0), (10, 1000, 1000)]), [None, None]);
    }

    #[test]
    fn copa_follows_the_timed_round_trips_where_the_smoothed_rtt_lags() {
        // Segments leave every millisecond and are acknowledged 40 ms later, while the kernel's smoothed RTT climbs
        // from 40 to 240 ms (an srtt-fed Copa shrinks on that: the test above).
        let mut alcc = AlccSender::new(CcKind::Copa, MSS, at(0)).unwrap();
        let mss = u64::from(MSS);
        alcc.on_tcp_info(at(0), &info(0, 0, 40));
        for ms in 1..=400u64 {
            let srtt = 40 + (ms / 2).min(200) as u32;
            alcc.on_tcp_info(at(ms), &info(ms * mss, ms.saturating_sub(40) * mss, srtt));
        }
        assert_eq!(alcc.stats().round_trips, 360, "every ACK covering newly sent data is timed");
        assert_eq!(alcc.window(), alcc.stats().peak_window, "no queue in the round trips: Copa never shrank");
        assert!(alcc.window() > 10 * mss, "{}", alcc.window());
    }

    #[test]
    fn an_ack_after_a_retransmission_carries_the_smoothed_rtt_until_data_sent_after_it_is_acknowledged() {
        let mut alcc = AlccSender::new(CcKind::Copa, MSS, at(0)).unwrap();
        let mss = u64::from(MSS);
        alcc.on_tcp_info(at(0), &info(0, 0, 40));
        alcc.on_tcp_info(at(1), &info(10 * mss, 0, 40));
        // A segment of those ten is retransmitted; the cumulative ACK then covers all ten (Karn: which copy?).
        let retransmitted = |sent: u64, acked: u64| TcpInfoSample { bytes_retrans: mss, ..info(sent + mss, acked, 40) };
        alcc.on_tcp_info(at(30), &retransmitted(10 * mss, 0));
        alcc.on_tcp_info(at(31), &retransmitted(20 * mss, 0));
        alcc.on_tcp_info(at(60), &retransmitted(20 * mss, 10 * mss));
        assert_eq!(alcc.stats().round_trips, 0, "the ten segments left before the retransmission");
        alcc.on_tcp_info(at(72), &retransmitted(20 * mss, 20 * mss));
        assert_eq!(alcc.stats().round_trips, 1, "the next ten left after it: timed, 41 ms");
    }

    #[test]
    fn the_pacing_rate_follows_the_window_over_the_rtt() {
        let mut alcc = AlccSender::new(CcKind::Copa, MSS, at(0)).unwrap();
        alcc.on_tcp_info(at(0), &info(0, 0, 50));
        let per_rtt = alcc.window() as f64 / 0.050;
        let rate = alcc.pacing_rate() as f64;
        assert!(rate >= per_rtt && rate <= 2.5 * per_rtt, "pacing {rate} B/s for {per_rtt} B/s of window");
    }
}
