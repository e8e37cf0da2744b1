//! Operation sequences on a two-path Pair, shared by the proptest (`random_operations.rs`) and the libFuzzer target
//! (`host-agent/fuzz/fuzz_targets/operations.rs`): write streams, advance time, drop, duplicate, mutate, reorder,
//! change addresses, take paths down and up, change policy, close. The protocol must never panic and never deliver a
//! byte that was not sent at that offset; once the network heals, a live connection delivers everything (or an end
//! closes by its idle timeout within one idle timeout of the heal: [`Healed`]).

use std::collections::BTreeMap;
use std::time::Duration;

use tng_proto::{
    CcKind, ConnectionError, EndpointConfig, Event, HostPolicy, SchedulerKind, StreamId, TailLossMode, TransportConfig,
};

use super::{payload, Pair, PathConfig};

/// Largest stream a Write opens; paths and ports an operation names are taken modulo what exists.
pub const MAX_WRITE: usize = 60_000;
pub const PATHS: usize = 2;

#[derive(Clone, Debug)]
pub enum Op {
    /// The client (or the server) opens a stream with this many bytes.
    Write {
        from_client: bool,
        len: usize,
    },
    Advance {
        millis: u64,
    },
    DropNext {
        count: u32,
    },
    DuplicateNext {
        count: u32,
    },
    /// The network changes one byte of each of the next datagrams (the receiver must reject them).
    MutateNext {
        count: u32,
    },
    Jitter {
        path: usize,
        millis: u64,
    },
    Loss {
        path: usize,
        percent: u8,
    },
    PathDown {
        path: usize,
    },
    PathUp {
        path: usize,
    },
    /// The client's address on a path changes.
    Move {
        path: usize,
        port: u16,
    },
    /// Steps the network and both endpoints.
    Drive {
        steps: u32,
    },
    /// The controller changes the client's policy mid-flight.
    Policy {
        scheduler: usize,
        alternate: bool,
        cc: usize,
    },
    /// One side closes the connection.
    Close {
        from_client: bool,
    },
}

/// How a schedule ended once the network healed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Healed {
    /// Every stream written on the connection arrived.
    Delivered,
    /// The connection had already ended (closed by an operation, or not established) when the network healed.
    AlreadyEnded,
    /// An end closed by its idle timeout within one idle timeout of the heal, before a probe got through: its
    /// silence began in the outage, so the timeout did its job.
    IdledOut,
}

fn config(tail_loss: TailLossMode, key_updates: u64) -> (EndpointConfig, EndpointConfig) {
    let transport =
        TransportConfig { tail_loss, key_update_interval_packets: key_updates, ..TransportConfig::default() };
    (
        EndpointConfig { transport: transport.clone(), ..EndpointConfig::client() },
        EndpointConfig { transport, ..EndpointConfig::server() },
    )
}

/// Runs `ops` on a fresh connection over two clean paths (10 and 35 ms); Err says which invariant broke.
pub fn run(ops: Vec<Op>, seed: u64, alternate: bool) -> Result<Healed, String> {
    let mode = if alternate { TailLossMode::AlternatePath } else { TailLossMode::SamePath };
    let (client_config, server_config) = config(mode, 40);
    let idle_timeout = client_config.transport.idle_timeout.min(server_config.transport.idle_timeout);
    let mut pair = Pair::new(client_config, server_config, vec![PathConfig::clean(10), PathConfig::clean(35)], seed);
    let (client, server) = pair.connect_and_wait();
    // What each side sent per stream: received bytes must always be a prefix of it.
    let mut sent_by_client: BTreeMap<StreamId, Vec<u8>> = BTreeMap::new();
    let mut sent_by_server: BTreeMap<StreamId, Vec<u8>> = BTreeMap::new();
    let mut serial = 0u64;
    for op in ops {
        match op {
            Op::Write { from_client, len } => {
                serial += 1;
                let data = payload(len.min(MAX_WRITE), seed ^ serial);
                let opened = if from_client {
                    pair.client_send(client, data.clone())
                } else {
                    pair.server_send(server, data.clone())
                };
                let Some(id) = opened else { continue };
                if from_client {
                    sent_by_client.insert(id, data);
                } else {
                    sent_by_server.insert(id, data);
                }
            }
            Op::Advance { millis } => pair.run_for(Duration::from_millis(millis)),
            Op::DropNext { count } => pair.drop_next += count,
            Op::DuplicateNext { count } => pair.duplicate_next += count,
            Op::MutateNext { count } => pair.mutate_next += count,
            Op::Jitter { path, millis } => pair.paths[path % PATHS].jitter = Duration::from_millis(millis),
            Op::Loss { path, percent } => pair.paths[path % PATHS].loss = f64::from(percent.min(100)) / 100.0,
            Op::PathDown { path } => pair.paths[path % PATHS].down = true,
            Op::PathUp { path } => pair.paths[path % PATHS].down = false,
            Op::Move { path, port } => {
                let path = path % PATHS;
                let new = std::net::SocketAddr::from(([10, 2, path as u8, 2], port));
                if !pair.client_addrs.contains(&new) {
                    pair.move_client_path(path, new);
                }
            }
            Op::Drive { steps } => {
                for _ in 0..steps {
                    pair.step();
                }
            }
            Op::Policy { scheduler, alternate, cc } => {
                let policy = HostPolicy {
                    cc: Some(CcKind::ALL[cc % CcKind::ALL.len()]),
                    scheduler: Some(SchedulerKind::ALL[scheduler % SchedulerKind::ALL.len()]),
                    tail_loss: Some(if alternate { TailLossMode::AlternatePath } else { TailLossMode::SamePath }),
                    ..HostPolicy::default()
                };
                if let Some(connection) = pair.client.connection(client) {
                    connection.set_policy(policy);
                }
            }
            Op::Close { from_client } => {
                let now = pair.now;
                let endpoint = if from_client { &mut pair.client } else { &mut pair.server };
                if let Some(connection) = endpoint.connection(if from_client { client } else { server }) {
                    connection.close(now, 7, "test");
                }
            }
        }
        check_prefixes(&pair, &sent_by_client, &sent_by_server)?;
    }
    // Heal the network: every stream written on a connection that is still alive must complete.
    for path in &mut pair.paths {
        *path = PathConfig::clean(path.delay.as_millis() as u64);
    }
    pair.drop_next = 0;
    pair.duplicate_next = 0;
    pair.mutate_next = 0;
    let client_alive = pair.client.connection(client).is_some_and(|c| c.is_established());
    let server_alive = pair.server.connection(server).is_some_and(|c| c.is_established());
    if !(client_alive && server_alive) {
        check_prefixes(&pair, &sent_by_client, &sent_by_server)?;
        return Ok(Healed::AlreadyEnded);
    }
    // Whether every stream arrived whole; that its bytes are the ones sent is `check_prefixes`'s part, at the end
    // (comparing every byte after every step made the check the schedule's largest cost).
    let delivered = |pair: &Pair| {
        let whole = |received: Option<&super::Received>, sent: &Vec<u8>| {
            received.is_some_and(|r| r.finished && r.data.len() == sent.len())
        };
        sent_by_client.iter().all(|(id, data)| whole(pair.server_received.get(&(server, *id)), data))
            && sent_by_server.iter().all(|(id, data)| whole(pair.client_received.get(&(client, *id)), data))
    };
    // An end that heard nothing through the outage may time out before the next (backed-off) probe crosses the
    // healed network; within one idle timeout of the heal that is the timeout's job, after it a liveness bug.
    let events = (pair.client_events.len(), pair.server_events.len());
    let mut outcome = Healed::Delivered;
    if !pair.run_until(idle_timeout, &delivered) {
        let idle = |(handle, event): &(_, Event), ours| {
            *handle == ours && matches!(event, Event::Closed { reason: ConnectionError::IdleTimeout(_) })
        };
        let idled_out = pair.client_events[events.0..].iter().any(|e| idle(e, client))
            || pair.server_events[events.1..].iter().any(|e| idle(e, server));
        if idled_out {
            outcome = Healed::IdledOut;
        } else if !pair.run_until(Duration::from_secs(120), &delivered) {
            return Err("live connection did not deliver everything after the network healed".into());
        }
    }
    check_prefixes(&pair, &sent_by_client, &sent_by_server)?;
    Ok(outcome)
}

fn check_prefixes(
    pair: &Pair,
    sent_by_client: &BTreeMap<StreamId, Vec<u8>>,
    sent_by_server: &BTreeMap<StreamId, Vec<u8>>,
) -> Result<(), String> {
    for ((_, id), received) in &pair.server_received {
        let sent = sent_by_client.get(id).map(Vec::as_slice).unwrap_or_default();
        check(sent.starts_with(&received.data), || format!("server read bytes never sent on stream {id}"))?;
        check(!received.finished || received.data.len() == sent.len(), || format!("stream {id} finished early"))?;
    }
    for ((_, id), received) in &pair.client_received {
        let sent = sent_by_server.get(id).map(Vec::as_slice).unwrap_or_default();
        check(sent.starts_with(&received.data), || format!("client read bytes never sent on stream {id}"))?;
        check(!received.finished || received.data.len() == sent.len(), || format!("stream {id} finished early"))?;
    }
    Ok(())
}

fn check(holds: bool, problem: impl FnOnce() -> String) -> Result<(), String> {
    if holds {
        Ok(())
    } else {
        Err(problem())
    }
}
