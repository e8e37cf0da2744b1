//! The perf server: answers perf requests over tng streams and over kernel TCP and MPTCP on the same port.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use tng_proto::alcc::{needs_receiver, AlccStats, ForecastMessages};
use tng_proto::{CcKind, ConnectionHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

use super::protocol::{fill_pattern, Queueing, Request, SenderStats, DATA_FOLLOWS, REFUSED, REQUEST_LEN, UNBOUNDED};
use super::{kernel, ByteStream};
use crate::alcc::{write_governed, AlccSocket};
use crate::driver::Agent;

const CHUNK: usize = 64 * 1024;

/// Longest a statistics request waits for the run's data streams to end and record their counters: a client asks
/// right after abandoning its streams at its deadline, and the server learns of that a moment later.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(2);

/// Sender-side statistics per client run token, and how many of each run's data streams are still being served.
#[derive(Clone, Default)]
pub struct StatsByToken(Arc<Runs>);

#[derive(Default)]
struct Runs {
    by_token: Mutex<HashMap<u64, Run>>,
    /// Signalled whenever a data stream of any run ends.
    stream_ended: Notify,
}

#[derive(Default)]
struct Run {
    stats: SenderStats,
    serving: usize,
    /// The latest packet counters of each tng connection of the run. A connection's counters cover all its streams,
    /// so a newer reading replaces the older; the run's are the sum over its connections (connections mode runs
    /// thousands).
    tng_packets: HashMap<ConnectionHandle, Packets>,
}

/// Packets a tng connection sent and retransmitted so far.
#[derive(Clone, Copy, Default)]
struct Packets {
    sent: u64,
    retransmitted: u64,
}

impl Run {
    /// Replaces `conn`'s counters with `latest` and moves the run's totals by the difference: adding all the
    /// connections up again at every stream's end would cost the server time in the number of connections.
    fn count_tng_packets(&mut self, conn: ConnectionHandle, latest: Packets) {
        let earlier = self.tng_packets.insert(conn, latest).unwrap_or_default();
        let stats = &mut self.stats;
        stats.sent_packets = (stats.sent_packets + latest.sent).saturating_sub(earlier.sent);
        stats.retransmitted_packets =
            (stats.retransmitted_packets + latest.retransmitted).saturating_sub(earlier.retransmitted);
    }
}

impl StatsByToken {
    fn update<T>(&self, token: u64, change: impl FnOnce(&mut Run) -> T) -> Option<T> {
        self.0.by_token.lock().ok().and_then(|mut runs| runs.get_mut(&token).map(change))
    }

    /// A data stream of run `token` starts (the run's first makes its entry).
    fn stream_started(&self, token: u64) {
        if let Ok(mut runs) = self.0.by_token.lock() {
            runs.entry(token).or_default().serving += 1;
        }
    }

    /// A data stream of run `token` ended: its counters are recorded, then waiting statistics requests go on.
    async fn stream_ended(&self, token: u64, counters: Counters) {
        record(self, token, counters).await;
        self.update(token, |run| run.serving = run.serving.saturating_sub(1));
        self.0.stream_ended.notify_waiters();
    }

    /// The run's statistics once none of its data streams is being served (or after [`SETTLE_TIMEOUT`]). The run
    /// is forgotten then: its client asks once, and a server that answers runs for days must not keep every one (a
    /// stream that ends later records nothing).
    async fn settled(&self, token: u64) -> SenderStats {
        let deadline = tokio::time::Instant::now() + SETTLE_TIMEOUT;
        loop {
            let ended = self.0.stream_ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            let serving = self.update(token, |run| run.serving).unwrap_or_default();
            if serving == 0 || tokio::time::timeout_at(deadline, ended).await.is_err() {
                let run = self.0.by_token.lock().ok().and_then(|mut runs| runs.remove(&token));
                return run.map(|run| run.stats).unwrap_or_default();
            }
        }
    }

    fn record(&self, token: u64, update: impl FnOnce(&mut SenderStats)) {
        self.update(token, |run| update(&mut run.stats));
    }

    /// Runs whose statistics were not asked for yet.
    #[cfg(test)]
    fn pending_runs(&self) -> usize {
        self.0.by_token.lock().map(|runs| runs.len()).unwrap_or_default()
    }
}

/// Where a finished data stream's sender-side counters come from.
pub enum Counters {
    /// A kernel socket: TCP_INFO (or MPTCP subflow info) of this descriptor, added per connection.
    Kernel(OwnedFd),
    /// A tng stream: the connection's totals, which cover every stream the run had on it.
    Tng { agent: Agent, conn: ConnectionHandle },
}

/// Serves kernel TCP and MPTCP clients on `listen`.
pub async fn serve_kernel(listen: SocketAddr, stats: StatsByToken) -> Result<()> {
    let listener = kernel::listen(listen)?;
    loop {
        let (stream, peer) = listener.accept().await?;
        stream.set_nodelay(true)?;
        let Some(probe) = kernel::probe(&stream) else { continue };
        let stats = stats.clone();
        tokio::spawn(async move {
            if let Err(err) = serve_stream(stream, &stats, Counters::Kernel(probe)).await {
                tracing::info!("perf connection from {peer}: {err:#}");
            }
        });
    }
}

/// Answers the requests of one stream until the client closes or abandons it, then records the sender's counters
/// (also when the client reset the stream at its deadline, which is how a run ends on time).
pub async fn serve_stream(mut io: impl ByteStream, stats: &StatsByToken, counters: Counters) -> Result<()> {
    let mut run_token = None;
    let mut alcc = None;
    let result = answer_requests(&mut io, stats, &counters, &mut run_token, &mut alcc).await;
    if let Some(token) = run_token {
        if let Some(alcc) = &alcc {
            stats.record(token, |s| s.alcc = Some(merge_alcc(s.alcc, alcc.stats())));
        }
        stats.stream_ended(token, counters).await;
    }
    result?;
    io.shutdown().await?;
    Ok(())
}

/// ALCC counters of a run's connections: samples, forecasts and round trips add up, peaks are the largest of any connection.
fn merge_alcc(run: Option<AlccStats>, connection: AlccStats) -> AlccStats {
    let run = run.unwrap_or_default();
    AlccStats {
        samples: run.samples + connection.samples,
        peak_window: run.peak_window.max(connection.peak_window),
        peak_kernel_bytes: run.peak_kernel_bytes.max(connection.peak_kernel_bytes),
        forecasts: run.forecasts + connection.forecasts,
        round_trips: run.round_trips + connection.round_trips,
    }
}

/// Answers requests until the client's side ends; `run_token` learns the run of the first data request, `alcc`
/// the ALCC controller of the first that asked for one.
async fn answer_requests(
    io: &mut impl ByteStream,
    stats: &StatsByToken,
    counters: &Counters,
    run_token: &mut Option<u64>,
    alcc: &mut Option<AlccSocket>,
) -> Result<()> {
    let mut applied_cc: Option<String> = None;
    let mut raw = [0u8; REQUEST_LEN];
    loop {
        match io.read_exact(&mut raw).await {
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(err) => return Err(err.into()),
        }
        match Request::decode(&raw)? {
            Request::Data { size, token, cc, alcc: alcc_kind } => {
                if run_token.is_none() {
                    stats.stream_started(token);
                    *run_token = Some(token);
                }
                if let Some(cc) = cc.filter(|cc| applied_cc.as_ref() != Some(cc)) {
                    if let Err(err) = apply_congestion(counters, &cc) {
                        refuse(io, &format!("{err:#}")).await?;
                        return Err(err);
                    }
                    applied_cc = Some(cc);
                }
                if let Some(kind) = alcc_kind.filter(|&kind| needs_receiver(kind) && size != UNBOUNDED) {
                    let err = anyhow::anyhow!(
                        "ALCC {kind} runs on bulk requests only (the client's forecasts share the direction its \
                         requests take)"
                    );
                    refuse(io, &format!("{err:#}")).await?;
                    return Err(err);
                }
                if let Some(kind) = alcc_kind.filter(|_| alcc.is_none()) {
                    match start_alcc(counters, kind) {
                        Ok(socket) => *alcc = Some(socket),
                        Err(err) => {
                            refuse(io, &format!("{err:#}")).await?;
                            return Err(err);
                        }
                    }
                }
                let gate = if alcc_kind.is_some() { alcc.as_mut() } else { None };
                if send_pattern(io, size, gate).await? == Sent::PeerClosed {
                    return Ok(());
                }
            }
            Request::Stats { token } => io.write_all(&stats.settled(token).await.encode()).await?,
        }
    }
}

/// The data sender is the server, so the congestion control a client asks for applies to the server's socket.
fn apply_congestion(counters: &Counters, cc: &str) -> Result<()> {
    match counters {
        Counters::Kernel(socket) => kernel::set_congestion(socket, cc),
        Counters::Tng { .. } => {
            anyhow::bail!("a tng stream has no kernel congestion control (the tng server's --cc or policy picks it)")
        }
    }
}

/// ALCC limits what the server writes to a kernel socket; a tng stream has its controller already.
fn start_alcc(counters: &Counters, kind: CcKind) -> Result<AlccSocket> {
    match counters {
        Counters::Kernel(socket) => AlccSocket::new(socket.try_clone().context("cannot duplicate the socket")?, kind),
        Counters::Tng { .. } => {
            anyhow::bail!("ALCC runs over kernel TCP; a tng stream's controller is the tng server's")
        }
    }
}

/// Answers a data request with the reason it cannot be served, and ends the stream.
async fn refuse(io: &mut impl ByteStream, reason: &str) -> Result<()> {
    let reason = &reason.as_bytes()[..reason.len().min(usize::from(u16::MAX))];
    let mut answer = vec![REFUSED];
    answer.extend_from_slice(&u16::try_from(reason.len())?.to_be_bytes());
    answer.extend_from_slice(reason);
    io.write_all(&answer).await?;
    io.shutdown().await?;
    Ok(())
}

async fn record(stats: &StatsByToken, token: u64, counters: Counters) {
    match counters {
        Counters::Kernel(socket) => {
            let subflows = kernel::subflow_info(&socket);
            let cc = kernel::congestion(&socket);
            stats.record(token, |s| {
                s.cc = cc;
                s.retransmitted_packets += subflows.iter().map(|i| u64::from(i.total_retrans)).sum::<u64>();
                s.sent_packets += subflows.iter().map(|i| u64::from(i.segs_out)).sum::<u64>();
            });
        }
        Counters::Tng { agent, conn } => {
            let Ok(Some(connection)) = agent.connection_stats(conn).await else { return };
            let streams = &connection.streams;
            let packets = Packets {
                sent: connection.channels.iter().map(|c| c.sent_packets).sum(),
                retransmitted: connection.channels.iter().map(|c| c.retransmitted_packets).sum(),
            };
            stats.update(token, |run| {
                run.count_tng_packets(conn, packets);
                run.stats.cc = connection.channels.first().map(|c| c.cc.to_owned());
                run.stats.queueing =
                    streams.queueing_delay_p50.zip(streams.queueing_delay_p95).map(|(p50, p95)| Queueing { p50, p95 });
            });
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Sent {
    All,
    PeerClosed,
}

/// Sends the [`DATA_FOLLOWS`] status and `size` pattern bytes, or for an unbounded request pattern bytes until the
/// peer closes its side; with `alcc`, only as many at a time as its controller allows, reading the kernel's state
/// at least every [`crate::alcc::POLL_INTERVAL`], and the client's forecasts if the controller runs on them.
async fn send_pattern(io: &mut impl ByteStream, size: u64, mut alcc: Option<&mut AlccSocket>) -> Result<Sent> {
    // The status byte rides in the first write with the data, so it costs no packet of its own. A small response
    // gets a buffer of its size: a server answering thousands of them a second would spend its time zeroing chunks.
    let mut chunk = vec![0u8; 1 + size.min(CHUNK as u64) as usize];
    chunk[0] = DATA_FOLLOWS;
    // Under ALCC every write is sent as it is made: a chunk of whole segments leaves no short packet at its end.
    let chunk_len = alcc.as_ref().map(|alcc| alcc.whole_segments(CHUNK)).filter(|&len| len > 1).unwrap_or(CHUNK);
    let mut status = 1;
    let mut offset = 0u64;
    let (mut reader, mut writer) = tokio::io::split(io);
    // What the client sends during an unbounded response: nothing, or Sprout's forecasts under ALCC.
    let mut upstream = [0u8; 512];
    let mut forecasts = alcc.as_ref().filter(|alcc| alcc.wants_forecasts()).map(|_| ForecastMessages::default());
    while status > 0 || offset < size {
        let len = (size - offset).min((chunk_len - status) as u64) as usize;
        let end = status + len;
        fill_pattern(offset, &mut chunk[status..end]);
        let mut pos = 0;
        while pos < end {
            let read = tokio::select! {
                written = write_governed(&mut writer, &chunk[pos..end], alcc.as_deref_mut()) => {
                    pos += written?;
                    continue;
                }
                read = reader.read(&mut upstream), if size == UNBOUNDED => read,
            };
            let read = match read {
                Ok(0) | Err(_) => return Ok(Sent::PeerClosed),
                Ok(read) => read,
            };
            if let (Some(messages), Some(alcc)) = (forecasts.as_mut(), alcc.as_deref_mut()) {
                for forecast in messages.push(&upstream[..read])? {
                    alcc.on_forecast(&forecast);
                }
            }
        }
        offset += len as u64;
        status = 0;
    }
    writer.flush().await?;
    Ok(Sent::All)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::protocol::count_corrupted;
    use tokio::net::TcpStream;

    /// A kernel perf server on a free loopback port.
    async fn kernel_server() -> SocketAddr {
        kernel_server_keeping(StatsByToken::default()).await
    }

    async fn kernel_server_keeping(stats: StatsByToken) -> SocketAddr {
        let addr = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port");
        tokio::spawn(serve_kernel(addr, stats));
        for _ in 0..100 {
            if TcpStream::connect(addr).await.is_ok() {
                return addr;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("perf server did not listen on {addr}");
    }

    async fn ask(addr: SocketAddr, request: Request) -> Vec<u8> {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream.write_all(&request.encode().expect("encodes")).await.expect("send request");
        stream.shutdown().await.expect("close our side");
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.expect("read answer");
        answer
    }

    #[tokio::test]
    async fn server_socket_sends_with_the_requested_congestion_control() {
        let addr = kernel_server().await;
        let answer = ask(addr, Request::Data { size: 5000, token: 42, cc: Some("reno".into()), alcc: None }).await;
        assert_eq!(answer.len(), 1 + 5000);
        assert_eq!(answer[0], DATA_FOLLOWS);
        assert_eq!(count_corrupted(0, &answer[1..]), 0);
        let stats = ask(addr, Request::Stats { token: 42 }).await;
        let stats = SenderStats::decode(stats.as_slice().try_into().expect("stats length"));
        assert_eq!(stats.cc.as_deref(), Some("reno"));
    }

    #[tokio::test]
    async fn alcc_delivers_intact_bytes_and_keeps_the_kernel_within_the_window() {
        let addr = kernel_server().await;
        let request = Request::Data { size: 2_000_000, token: 43, cc: None, alcc: Some(CcKind::Copa) };
        let answer = ask(addr, request).await;
        assert_eq!(answer.len(), 1 + 2_000_000);
        assert_eq!(answer[0], DATA_FOLLOWS);
        assert_eq!(count_corrupted(0, &answer[1..]), 0);
        let stats = ask(addr, Request::Stats { token: 43 }).await;
        let stats = SenderStats::decode(stats.as_slice().try_into().expect("stats length"));
        let alcc = stats.alcc.expect("the server reports what ALCC saw");
        assert!(alcc.samples > 0, "{alcc:?}");
        // The allowance is whole segments: the kernel holds less than one beyond the window (loopback's are < 64 KiB).
        assert!(alcc.peak_kernel_bytes > 0 && alcc.peak_kernel_bytes < alcc.peak_window + 65_536, "{alcc:?}");
    }

    #[tokio::test]
    async fn a_run_is_forgotten_once_its_statistics_were_asked_for() {
        let runs = StatsByToken::default();
        let addr = kernel_server_keeping(runs.clone()).await;
        ask(addr, Request::Data { size: 50_000, token: 44, cc: None, alcc: None }).await;
        let stats = ask(addr, Request::Stats { token: 44 }).await;
        let stats = SenderStats::decode(stats.as_slice().try_into().expect("stats length"));
        assert!(stats.sent_packets > 0, "{stats:?}");
        assert_eq!(runs.pending_runs(), 0);
        let again = ask(addr, Request::Stats { token: 44 }).await;
        assert_eq!(SenderStats::decode(again.as_slice().try_into().expect("stats length")), SenderStats::default());
        assert_eq!(runs.pending_runs(), 0);
    }

    #[test]
    fn a_runs_tng_packets_add_up_over_its_connections_and_not_over_its_streams() {
        let mut run = Run::default();
        let (first, second) = (ConnectionHandle(1), ConnectionHandle(2));
        run.count_tng_packets(first, Packets { sent: 10, retransmitted: 1 });
        run.count_tng_packets(second, Packets { sent: 5, retransmitted: 0 });
        // A later stream of the first connection reads its totals again: they replace the earlier reading.
        run.count_tng_packets(first, Packets { sent: 30, retransmitted: 2 });
        assert_eq!((run.stats.sent_packets, run.stats.retransmitted_packets), (35, 2));
    }

    #[tokio::test]
    async fn unknown_congestion_control_is_refused_with_the_reason() {
        let addr = kernel_server().await;
        let answer = ask(addr, Request::Data { size: 5000, token: 7, cc: Some("no-such-cc".into()), alcc: None }).await;
        assert_eq!(answer[0], REFUSED);
        let len = usize::from(u16::from_be_bytes([answer[1], answer[2]]));
        let reason = std::str::from_utf8(&answer[3..]).expect("UTF-8 reason");
        assert_eq!(reason.len(), len);
        assert_eq!(reason, "congestion control \"no-such-cc\" is not available in this kernel");
    }

    #[tokio::test]
    async fn alcc_sprout_is_refused_for_a_sized_request_and_ends_a_bulk_one_on_a_bad_forecast() {
        let addr = kernel_server().await;
        let answer = ask(addr, Request::Data { size: 5000, token: 8, cc: None, alcc: Some(CcKind::Sprout) }).await;
        assert_eq!(answer[0], REFUSED);
        let reason = String::from_utf8_lossy(&answer[3..]);
        assert!(reason.contains("ALCC sprout runs on bulk requests only"), "{reason}");

        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let bulk = Request::Data { size: UNBOUNDED, token: 9, cc: None, alcc: Some(CcKind::Sprout) };
        stream.write_all(&bulk.encode().expect("encodes")).await.expect("send request");
        let mut first = [0u8; 1000];
        stream.read_exact(&mut first).await.expect("data flows");
        assert_eq!(first[0], DATA_FOLLOWS);
        // Not a forecast message: a zero length.
        stream.write_all(&[0, 0]).await.expect("send");
        let mut rest = Vec::new();
        let ended = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut rest)).await;
        assert!(ended.is_ok(), "the server ends the connection instead of sending on");
    }
}
