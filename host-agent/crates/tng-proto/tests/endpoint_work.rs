//! The endpoint's work per event follows what its connections have to do, not how many it holds: a due timer runs
//! its connection only, and an application write sends on its connection only, with the same number of calls into
//! connections whether the endpoint holds a few or hundreds.

mod common;

use std::time::Duration;

use common::{Pair, PathConfig};
use tng_proto::{ConnectionHandle, Endpoint, EndpointConfig, Event, StaticKeypair, Time};
use tng_wire::Packet;

fn connection_id_of(payload: &[u8]) -> u64 {
    Packet::parse(payload).expect("the endpoint sends well-formed packets").connection_id
}

/// What one event cost and produced: timers run, connections asked to send, connection ids of the datagrams sent.
#[derive(Debug, PartialEq, Eq)]
struct Work {
    timers_fired: u64,
    transmit_polls: u64,
    senders: Vec<u64>,
}

fn sent_after(endpoint: &mut Endpoint, now: Time, run: impl FnOnce(&mut Endpoint)) -> Work {
    let before = endpoint.stats();
    run(endpoint);
    let mut senders = Vec::new();
    while let Some(transmit) = endpoint.poll_datagram(now) {
        senders.push(connection_id_of(&transmit.payload));
    }
    let after = endpoint.stats();
    Work {
        timers_fired: after.timers_fired - before.timers_fired,
        transmit_polls: after.transmit_polls - before.transmit_polls,
        senders,
    }
}

/// `count` client connections to a server that never answers, opened 100 us apart; the first one's handshake
/// repeat timer comes due. Returns the work of that timeout and the first connection's id.
fn first_hello_repeat(count: usize) -> (Work, u64) {
    let mut client = Endpoint::new(EndpointConfig::client(), StaticKeypair::from_seed(7), 7);
    let path = [(common::client_addr(0), common::addr(common::SERVER))];
    let handles: Vec<ConnectionHandle> =
        (0..count).map(|i| client.connect(Time::from_micros(100 * i as u64), &path, None).expect("connect")).collect();
    let opened = Time::from_micros(100 * count as u64);
    let hellos = sent_after(&mut client, opened, |_| {});
    assert_eq!(hellos.senders.len(), count, "every connection sends its stage 1");
    let due = client.poll_timeout().expect("a handshake waits for its answer");
    let first_id = client.connection_stats(handles[0]).expect("held").connection_id;
    (sent_after(&mut client, due, |client| client.handle_timeout(due)), first_id)
}

#[test]
fn a_due_timer_runs_its_connection_only_whatever_the_number_held() {
    let (few, first_of_few) = first_hello_repeat(3);
    let (many, first_of_many) = first_hello_repeat(300);
    assert_eq!(few.timers_fired, 1);
    assert_eq!(few.senders, vec![first_of_few], "only the connection whose timer fired repeats its hello");
    assert_eq!(many.senders, vec![first_of_many]);
    assert_eq!((few.timers_fired, few.transmit_polls), (many.timers_fired, many.transmit_polls));
}

/// `count` established connections between one client and one server endpoint, left to settle for a second; then
/// the application writes on the last one. Returns the work of that write and its connection id.
fn write_on_one_of(count: usize) -> (Work, u64) {
    let mut pair = Pair::default_with_paths(vec![PathConfig::clean(5)], 11);
    let handles: Vec<ConnectionHandle> = (0..count).map(|_| pair.connect()).collect();
    let connected = pair.run_until(Duration::from_secs(10), |pair| {
        pair.client_events.iter().filter(|(_, event)| matches!(event, Event::Connected { .. })).count() == count
    });
    assert!(connected, "every handshake completes");
    pair.run_for(Duration::from_secs(1));
    let now = pair.now;
    // What the last timers released goes out first.
    sent_after(&mut pair.client, now, |_| {});
    let last = *handles.last().expect("at least one connection");
    let id = pair.client.connection_stats(last).expect("held").connection_id;
    let work = sent_after(&mut pair.client, now, |client| {
        let connection = client.connection(last).expect("held");
        let stream = connection.open_stream().expect("stream credit");
        assert_eq!(connection.write(now, stream, b"hello"), Ok(5));
        connection.finish(stream).expect("finish");
    });
    (work, id)
}

#[test]
fn an_application_write_sends_on_its_connection_only_whatever_the_number_held() {
    let (few, written_of_few) = write_on_one_of(2);
    let (many, written_of_many) = write_on_one_of(100);
    assert!(!few.senders.is_empty());
    assert!(few.senders.iter().all(|&id| id == written_of_few), "{few:?}");
    assert!(many.senders.iter().all(|&id| id == written_of_many), "{many:?}");
    assert_eq!((few.senders.len(), few.transmit_polls), (many.senders.len(), many.transmit_polls));
}
