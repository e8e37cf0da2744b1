//! Benchmark: memory an idle connection holds, on each side.
//!
//! A client and a server endpoint open `--connections N` connections (default 1000) in memory on virtual time,
//! exchange one request and a 60 kB response on each (so that send and receive buffers were used), then idle for
//! two seconds. Heap bytes
//! are counted by a counting allocator: each endpoint's share is what dropping it frees. The process's RSS growth
//! over the same span is reported too (allocator overhead and fragmentation included). `--json` prints one object.

use std::alloc::{GlobalAlloc, Layout, System};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tng_proto::{ConnectionHandle, Endpoint, EndpointConfig, Event, ReadOutcome, StaticKeypair, Time};

struct Counting;

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; only a counter is added.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(new_size, Ordering::Relaxed);
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// What the server answers; written once, so a send buffer that refuses part of it sends only the rest.
static RESPONSE: [u8; 60_000] = [7; 60_000];

fn main() {
    let json = std::env::args().any(|a| a == "--json");
    let count: usize = flag_value("--connections").unwrap_or(1000);
    let rss_before = resident_bytes();
    let heap_before = LIVE_BYTES.load(Ordering::Relaxed);
    let mut client = Endpoint::new(EndpointConfig::client(), StaticKeypair::from_seed(1), 1);
    let mut server = Endpoint::new(EndpointConfig::server(), StaticKeypair::from_seed(2), 2);
    let server_addr: SocketAddr = "10.0.0.1:4477".parse().expect("address");
    let mut now = Time::ZERO;
    let handles: Vec<ConnectionHandle> = (0..count)
        .map(|i| {
            let client_addr = SocketAddr::from(([10, 1, (i / 256) as u8, (i % 256) as u8], 5000));
            client.connect(now, &[(client_addr, server_addr)], None).expect("connect")
        })
        .collect();
    let end = now + Duration::from_secs(2);
    let mut exchanged = 0;
    loop {
        exchange(now, &mut client, &mut server);
        exchanged += play(now, &mut client, &mut server);
        let next = [client.poll_timeout(), server.poll_timeout()].into_iter().flatten().min();
        match next {
            Some(next) if next <= end => {
                now = now.max(next);
                client.handle_timeout(now);
                server.handle_timeout(now);
            }
            _ => break,
        }
    }
    assert_eq!(exchanged, count, "every connection answered its request");
    assert_eq!(client.stats().connections, handles.len());
    let rss_after = resident_bytes();
    let heap_with_both = LIVE_BYTES.load(Ordering::Relaxed);
    drop(client);
    let heap_without_client = LIVE_BYTES.load(Ordering::Relaxed);
    drop(server);
    let heap_without_either = LIVE_BYTES.load(Ordering::Relaxed);
    let per = |bytes: usize| bytes as f64 / count as f64;
    let client_bytes = per(heap_with_both - heap_without_client);
    let server_bytes = per(heap_without_client - heap_without_either);
    let rss_pair = per(rss_after.saturating_sub(rss_before));
    let leftover = per(heap_without_either.saturating_sub(heap_before));
    if json {
        println!(
            "{{\"benchmark\":\"idle-connection-memory\",\"connections\":{count},\
             \"client_heap_bytes_per_connection\":{client_bytes:.0},\
             \"server_heap_bytes_per_connection\":{server_bytes:.0},\
             \"rss_bytes_per_connection_pair\":{rss_pair:.0},\"heap_left_after_drop_per_connection\":{leftover:.0}}}"
        );
    } else {
        println!(
            "{count} idle connections: {client_bytes:.0} heap bytes each on the client, {server_bytes:.0} on the \
             server; RSS grew {rss_pair:.0} bytes per connection pair"
        );
    }
}

/// Hands every datagram either side wants to send to the other, until neither has one.
fn exchange(now: Time, client: &mut Endpoint, server: &mut Endpoint) {
    loop {
        let mut moved = false;
        while let Some(t) = client.poll_datagram(now) {
            server.handle_datagram(now, t.remote, t.local, t.ecn, &t.payload);
            moved = true;
        }
        while let Some(t) = server.poll_datagram(now) {
            client.handle_datagram(now, t.remote, t.local, t.ecn, &t.payload);
            moved = true;
        }
        if !moved {
            return;
        }
    }
}

/// The applications: each client sends an 8-byte request once connected, the server answers it with 8 bytes.
/// Returns how many answers the clients read in full.
fn play(now: Time, client: &mut Endpoint, server: &mut Endpoint) -> usize {
    let mut answers = 0;
    let mut buffer = [0u8; 65536];
    while let Some((handle, event)) = client.poll_event() {
        let Some(connection) = client.connection(handle) else { continue };
        match event {
            Event::Connected { .. } => {
                let stream = connection.open_stream().expect("stream credit");
                connection.write(now, stream, b"request!").expect("write");
                connection.finish(stream).expect("finish");
            }
            Event::StreamReadable(stream) => loop {
                match connection.read(stream, &mut buffer) {
                    Ok(ReadOutcome::Data(_)) => {}
                    Ok(ReadOutcome::Finished) => {
                        answers += 1;
                        break;
                    }
                    _ => break,
                }
            },
            _ => {}
        }
    }
    while let Some((handle, event)) = server.poll_event() {
        let Some(connection) = server.connection(handle) else { continue };
        if let Event::StreamOpened(stream) | Event::StreamReadable(stream) = event {
            let mut finished = false;
            loop {
                match connection.read(stream, &mut buffer) {
                    Ok(ReadOutcome::Data(_)) => {}
                    Ok(ReadOutcome::Finished) => {
                        finished = true;
                        break;
                    }
                    _ => break,
                }
            }
            // A stream reports its end once per event that finds it; it is answered once.
            if finished && connection.write(now, stream, &RESPONSE).is_ok() {
                connection.finish(stream).expect("finish");
            }
        }
    }
    answers
}

/// The process's resident set size, from /proc/self/statm (0 where that does not exist).
fn resident_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm.split_whitespace().nth(1).and_then(|field| field.parse().ok()).unwrap_or(0);
    pages * 4096
}

fn flag_value<T: std::str::FromStr>(name: &str) -> Option<T> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok())
}
