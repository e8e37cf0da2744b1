//! `tng perf client --mode connections`: how many connections a server holds. One endpoint opens them all, then each
//! asks for a small response every interval on a stream of its own.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use tng_proto::ConnectionHandle;
use tokio::task::JoinSet;

use super::{abandon, finish, open, receive, request_data, ClientOptions, Dialer, Outcome, Progress, Received};
use crate::driver::{Agent, Route};
use crate::perf::stats::Summary;

/// Handshakes connections mode keeps in flight: enough to measure how fast the server accepts, few enough that the
/// load generator does not flood its server (which answers with RETRYs beyond 64 pending handshakes) or its own
/// driver.
const HANDSHAKES_IN_FLIGHT: usize = 256;
/// A connections-mode request whose response has not arrived within this long loses its connection.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections mode's run: first the handshakes, at most [`HANDSHAKES_IN_FLIGHT`] at once; then the measured phase,
/// `duration_s` from the moment the last handshake finished, in which every established connection, from a random
/// phase within the interval on, opens a stream every interval for one request. A request started in the phase may
/// finish after it. The run's statistics travel on one more connection, not counted here.
#[derive(Debug, Serialize)]
pub struct ConnectionsReport {
    /// Connections asked for (`--connections`).
    pub requested: usize,
    pub established: usize,
    /// Handshakes that failed or did not finish within the connect timeout (10 s).
    pub failed_handshakes: usize,
    /// Established connections on which a request failed or went unanswered for [`REQUEST_TIMEOUT`] (10 s); a
    /// lost connection makes no more requests.
    pub lost: usize,
    /// What went wrong first: a handshake (`handshake: ...`) or a lost connection's request (`request: ...`).
    pub first_error: Option<String>,
    /// Seconds from the first handshake's start until the last one finished (established or failed).
    pub establish_s: f64,
    /// Connections established per second of `establish_s`.
    pub handshakes_per_s: f64,
    /// Each established connection's handshake, from asking for it until it was established (a RETRY's round trip
    /// included).
    pub handshake_ms: Summary,
    /// Each completed request, from opening its stream until the last byte of its response arrived.
    pub request_ms: Summary,
    /// Requests whose whole response arrived (every byte checked against the pattern).
    pub requests: usize,
    /// The time between one connection's requests (`--interval`).
    pub interval_s: f64,
}

/// Connections mode (see [`ConnectionsReport`]): the handshakes, then every connection's requests until the measured
/// phase ends; the connections are closed at the end.
pub(super) async fn connections(
    options: &ClientOptions,
    dialer: &Dialer,
    token: u64,
    progress: &Arc<Progress>,
) -> Result<Outcome> {
    let Dialer::Tng { agent, route, .. } = dialer else {
        bail!("--mode connections needs --transport tng: it opens tng connections");
    };
    let handshakes = establish(agent, route, options.connections, progress).await;
    let measure_start = Instant::now();
    let deadline = measure_start + options.duration;
    let shared = Arc::new(options.clone());
    let mut phases = StdRng::seed_from_u64(options.seed);
    let mut exchanging = JoinSet::new();
    for &conn in &handshakes.established {
        let first = measure_start + options.interval.mul_f64(phases.gen::<f64>());
        let dialer = Dialer::Tng { agent: agent.clone(), route: route.clone(), conn };
        let (options, progress) = (shared.clone(), progress.clone());
        exchanging
            .spawn(async move { request_periodically(&options, &dialer, token, first, deadline, &progress).await });
    }
    let mut outcome = Outcome::default();
    let mut request_ms = Vec::new();
    let mut lost = 0;
    let mut first_error = handshakes.first_error;
    while let Some(done) = exchanging.join_next().await {
        let periodic = done?;
        outcome.merge(periodic.outcome);
        request_ms.extend(periodic.request_ms);
        if let Some(err) = periodic.lost {
            lost += 1;
            first_error.get_or_insert(format!("request: {err}"));
        }
    }
    // The connections are held for the whole phase, also when their last requests ended a little before it.
    tokio::time::sleep_until(deadline.into()).await;
    outcome.measured_s = Some(options.duration.as_secs_f64());
    for &conn in &handshakes.established {
        agent.close(conn, "perf run done");
    }
    let establish_s = handshakes.took.as_secs_f64();
    outcome.connections = Some(ConnectionsReport {
        requested: options.connections,
        established: handshakes.established.len(),
        failed_handshakes: handshakes.failed,
        lost,
        first_error,
        establish_s,
        handshakes_per_s: handshakes.established.len() as f64 / establish_s.max(1e-9),
        handshake_ms: Summary::of(&handshakes.handshake_ms),
        requests: request_ms.len(),
        request_ms: Summary::of(&request_ms),
        interval_s: options.interval.as_secs_f64(),
    });
    Ok(outcome)
}

/// Connections mode's handshakes.
#[derive(Default)]
struct Handshakes {
    established: Vec<ConnectionHandle>,
    handshake_ms: Vec<f64>,
    failed: usize,
    first_error: Option<String>,
    /// From the first handshake's start until the last one finished.
    took: Duration,
}

/// Opens `count` connections over `route`, [`HANDSHAKES_IN_FLIGHT`] at a time.
async fn establish(agent: &Agent, route: &Route, count: usize, progress: &Progress) -> Handshakes {
    let started = Instant::now();
    let mut handshakes = Handshakes::default();
    let mut in_flight = JoinSet::new();
    let mut begun = 0;
    while begun < count || !in_flight.is_empty() {
        if begun < count && in_flight.len() < HANDSHAKES_IN_FLIGHT {
            let (agent, route) = (agent.clone(), route.clone());
            in_flight.spawn(async move {
                let started = Instant::now();
                route.connect(&agent).await.map(|conn| (conn, started.elapsed()))
            });
            begun += 1;
            continue;
        }
        let Some(done) = in_flight.join_next().await else { break };
        match done.map_err(anyhow::Error::from).and_then(|connected| connected) {
            Ok((conn, took)) => {
                handshakes.established.push(conn);
                handshakes.handshake_ms.push(took.as_secs_f64() * 1000.0);
                progress.established.fetch_add(1, Ordering::Relaxed);
            }
            Err(err) => {
                handshakes.failed += 1;
                handshakes.first_error.get_or_insert_with(|| format!("handshake: {err:#}"));
            }
        }
    }
    handshakes.took = started.elapsed();
    handshakes
}

/// What one connection of connections mode did.
#[derive(Default)]
struct Periodic {
    outcome: Outcome,
    request_ms: Vec<f64>,
    /// Why the connection was lost, if it was.
    lost: Option<String>,
}

/// One request every `options.interval` from `first` on, each started before `deadline`, until one fails.
async fn request_periodically(
    options: &ClientOptions,
    dialer: &Dialer,
    token: u64,
    first: Instant,
    deadline: Instant,
    progress: &Progress,
) -> Periodic {
    let mut periodic = Periodic::default();
    let mut next = first;
    while next < deadline {
        tokio::time::sleep_until(next.into()).await;
        let answer_by = Instant::now() + REQUEST_TIMEOUT;
        let request = request_once(options, dialer, token, answer_by, progress, &mut periodic.outcome);
        let failure = match tokio::time::timeout_at(answer_by.into(), request).await {
            Ok(Ok(took)) => {
                periodic.request_ms.push(took.as_secs_f64() * 1000.0);
                progress.requests.fetch_add(1, Ordering::Relaxed);
                None
            }
            Ok(Err(err)) => Some(format!("{err:#}")),
            Err(_) => Some(format!("no response within {} s", REQUEST_TIMEOUT.as_secs())),
        };
        if failure.is_some() {
            progress.lost.fetch_add(1, Ordering::Relaxed);
            periodic.lost = failure;
            break;
        }
        // A request that took longer than the interval delays the next rather than bunching those it overran.
        next = (next + options.interval).max(Instant::now());
    }
    periodic
}

/// One request on a stream of its own, its response read and checked by `answer_by`; the time until the response's
/// last byte.
async fn request_once(
    options: &ClientOptions,
    dialer: &Dialer,
    token: u64,
    answer_by: Instant,
    progress: &Progress,
    outcome: &mut Outcome,
) -> Result<Duration> {
    let started = Instant::now();
    let mut opened = open(options, dialer, 0).await?;
    request_data(options, dialer, &mut opened, options.response_bytes, token).await?;
    if receive(&mut opened.io, options.response_bytes, answer_by, progress, outcome, None).await? == Received::Cut {
        abandon(opened, outcome);
        bail!("the response was not complete within {} s", REQUEST_TIMEOUT.as_secs());
    }
    let took = started.elapsed();
    finish(opened, answer_by, outcome).await?;
    Ok(took)
}
