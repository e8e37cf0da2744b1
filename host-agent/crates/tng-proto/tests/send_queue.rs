//! The sender's queue on a link far slower than the application writes: the unsent bound (TCP_NOTSENT_LOWAT) keeps
//! what waits in the sender near one congestion window, without costing throughput.

mod common;

use std::time::Duration;

use common::{payload, Pair, PathConfig};
use tng_proto::EndpointConfig;

/// Virtual time each download runs.
const RUN: Duration = Duration::from_secs(10);
/// 5 Mbit/s.
const RATE: u64 = 625_000;

/// 5 Mbit/s, 40 ms round trip, a 100 ms drop-tail queue.
fn slow_path() -> PathConfig {
    PathConfig { rate: Some(RATE), queue: Some(Duration::from_millis(100)), ..PathConfig::clean(20) }
}

#[derive(Debug)]
struct Outcome {
    /// Bytes the client's application read.
    delivered: u64,
    /// Largest unsent backlog the server held.
    max_unsent: u64,
    /// Largest the bound ever was.
    max_limit: u64,
    /// Steps at which the backlog exceeded every bound set so far.
    over_bound: u32,
    queueing_p50: Duration,
    queueing_p95: Duration,
}

/// The server's application offers 20 MB at once (32 s of the link) and the client reads for [`RUN`].
fn download(unsent_windows: Option<u32>) -> Outcome {
    let mut server_config = EndpointConfig::server();
    server_config.transport.streams.unsent_windows = unsent_windows;
    let mut pair = Pair::new(EndpointConfig::client(), server_config, vec![slow_path()], 41);
    let (_, server) = pair.connect_and_wait();
    pair.server_send(server, payload(20_000_000, 42));
    let (mut max_unsent, mut max_limit, mut over_bound) = (0, 0, 0);
    pair.run_until(RUN, |pair| {
        let streams = pair.server.connection_stats(server).expect("server connection").streams;
        max_limit = max_limit.max(streams.unsent_limit.unwrap_or(u64::MAX));
        max_unsent = max_unsent.max(streams.bytes_unsent);
        if streams.bytes_unsent > max_limit {
            over_bound += 1;
        }
        false
    });
    let streams = pair.server.connection_stats(server).expect("server connection").streams;
    Outcome {
        delivered: pair.client_received.values().map(|received| received.data.len() as u64).sum(),
        max_unsent,
        max_limit,
        over_bound,
        queueing_p50: streams.queueing_delay_p50.expect("bytes were sent"),
        queueing_p95: streams.queueing_delay_p95.expect("bytes were sent"),
    }
}

#[test]
fn the_unsent_bound_keeps_the_sender_queue_short_at_full_throughput() {
    let bounded = download(Some(1));
    let unbounded = download(None);
    eprintln!("bounded: {bounded:?}\nunbounded: {unbounded:?}");
    assert_eq!(bounded.over_bound, 0, "the backlog exceeded its bound: {bounded:?}");
    // A window of this path is about its bandwidth-delay product plus its queue, 88 kB (CUBIC overshoots to twice
    // that): the backlog stays within it.
    assert!(bounded.max_limit < 256 * 1024, "{bounded:?}");
    let (p50, p95) = (bounded.queueing_p50, bounded.queueing_p95);
    assert!(p50 <= p95 && p95 < Duration::from_millis(500), "{bounded:?}");
    // Without the bound, as much queues as the receiver's credit lets out: seconds of the link's rate.
    assert!(unbounded.max_unsent > 1_000_000, "{unbounded:?}");
    assert!(unbounded.queueing_p50 > Duration::from_secs(2), "{unbounded:?}");
    // Throughput is the same, and close to the link's.
    assert!(bounded.delivered as f64 >= 0.95 * unbounded.delivered as f64, "{bounded:?} vs {unbounded:?}");
    let capacity = RATE as f64 * RUN.as_secs_f64();
    assert!(bounded.delivered as f64 >= 0.85 * capacity, "{bounded:?}: capacity {capacity} bytes");
}
