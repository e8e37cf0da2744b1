//! What an idle connection keeps on the heap, counted by a counting allocator: buffers must be allocated on demand
//! and given back, not sized to the windows up front (issue 13: an idle connection holds at most 64 KiB).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;

use common::{Pair, PathConfig};
use tng_proto::{Endpoint, EndpointConfig, Event, StaticKeypair};

struct Counting;

thread_local! {
    /// Heap bytes this thread allocated minus those it freed: the test's own, whatever the harness does elsewhere.
    static LIVE_BYTES: Cell<isize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    // `try_with`: the allocator also runs while a thread's locals are torn down.
    let _ = LIVE_BYTES.try_with(|live| live.set(live.get() + delta));
}

// SAFETY: every call is forwarded unchanged to the system allocator; only a counter is added.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as isize - layout.size() as isize);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live_bytes() -> isize {
    LIVE_BYTES.with(Cell::get)
}

/// Heap bytes that dropping `endpoint` gives back.
fn heap_held(endpoint: Endpoint) -> isize {
    let before = live_bytes();
    drop(endpoint);
    before - live_bytes()
}

const CONNECTIONS: usize = 16;
const RESPONSE_BYTES: usize = 200_000;
const IDLE_CONNECTION_LIMIT: isize = 64 * 1024;

#[test]
fn an_idle_connection_holds_at_most_64_kib_of_heap_on_each_side() {
    let mut pair = Pair::default_with_paths(vec![PathConfig::clean(10)], 13);
    let empty_client = heap_held(Endpoint::new(EndpointConfig::client(), StaticKeypair::from_seed(1), 1));
    let empty_server = heap_held(Endpoint::new(EndpointConfig::server(), StaticKeypair::from_seed(2), 2));

    let clients: Vec<_> = (0..CONNECTIONS).map(|_| pair.connect()).collect();
    let all_connected = pair.run_until(Duration::from_secs(10), |pair| {
        pair.server_events.iter().filter(|(_, event)| matches!(event, Event::Connected { .. })).count() == CONNECTIONS
    });
    assert!(all_connected, "{} connections did not all complete their handshakes", CONNECTIONS);
    let servers: Vec<_> = pair
        .server_events
        .iter()
        .filter(|(_, event)| matches!(event, Event::Connected { .. }))
        .map(|(handle, _)| *handle)
        .collect();
    // Both directions carry more than a window's worth of buffering would be, so that buffers were used.
    for (&client, &server) in clients.iter().zip(&servers) {
        pair.client_send(client, vec![1; 2000]).expect("client stream");
        pair.server_send(server, vec![2; RESPONSE_BYTES]).expect("server stream");
    }
    let all_read = pair.run_until(Duration::from_secs(30), |pair| {
        pair.client_received.values().filter(|r| r.finished && r.data.len() == RESPONSE_BYTES).count() == CONNECTIONS
            && pair.server_received.values().filter(|r| r.finished).count() == CONNECTIONS
    });
    assert!(all_read, "not every request and response arrived in 30 s");
    pair.run_for(Duration::from_secs(2));
    assert_eq!(pair.client.stats().connections, CONNECTIONS, "the connections stay open while idle");

    let idle = |endpoint: Endpoint, empty: isize| (heap_held(endpoint) - empty) / CONNECTIONS as isize;
    let fresh_client = Endpoint::new(EndpointConfig::client(), StaticKeypair::from_seed(3), 3);
    let fresh_server = Endpoint::new(EndpointConfig::server(), StaticKeypair::from_seed(4), 4);
    let client = idle(std::mem::replace(&mut pair.client, fresh_client), empty_client);
    let server = idle(std::mem::replace(&mut pair.server, fresh_server), empty_server);
    assert!(client > 0 && server > 0, "the counter saw the connections: client {client}, server {server} bytes");
    assert!(client <= IDLE_CONNECTION_LIMIT, "an idle client connection holds {client} heap bytes");
    assert!(server <= IDLE_CONNECTION_LIMIT, "an idle server connection holds {server} heap bytes");
}
