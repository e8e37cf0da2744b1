//! Two `Streams` talking through encoded frames: a perfect network for the unit tests, a lossy, reordering,
//! duplicating one (with in-path boxes that acknowledge packets and then drop them) for the property test.

mod credit;
mod frame_writing;
mod hostile_network;
mod lifecycle;
mod peer_frames;
mod receiving;
mod sending;

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::time::Duration;

use proptest::prelude::*;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use tng_wire::{parse_frames, varint, Frame};

use super::frame_writing::{stream_frame_capacity, truncate_ack_to_fit};
use super::*;

const MTU: usize = 1200;
const RTO: Duration = Duration::from_millis(200);

/// One packet's worth of frames and what it carried.
#[derive(Clone, Debug)]
struct Packet {
    from: Side,
    bytes: Vec<u8>,
    chunks: Vec<SentChunk>,
}

struct Pair {
    client: Streams,
    server: Streams,
    now: Time,
}

impl Pair {
    fn new(client: StreamConfig, server: StreamConfig) -> Pair {
        Pair {
            client: Streams::new(Side::Client, client.clone(), server.limits()),
            server: Streams::new(Side::Server, server, client.limits()),
            now: Time::ZERO,
        }
    }

    fn default_configs() -> Pair {
        Pair::new(StreamConfig::default(), StreamConfig::default())
    }

    fn side(&mut self, side: Side) -> &mut Streams {
        match side {
            Side::Client => &mut self.client,
            Side::Server => &mut self.server,
        }
    }

    /// The next packet `from` would send, if it has anything.
    fn transmit(&mut self, from: Side, max_len: usize) -> Option<Packet> {
        let now = self.now;
        let streams = self.side(from);
        if !streams.has_pending_frames(now) {
            return None;
        }
        let (mut bytes, mut chunks) = (Vec::new(), Vec::new());
        streams.write_frames(now, max_len, &mut bytes, &mut chunks);
        assert!(bytes.len() <= max_len);
        (!bytes.is_empty()).then_some(Packet { from, bytes, chunks })
    }

    /// Hands a packet's frames to the other side; the flow layer then reports the packet acknowledged.
    fn deliver(&mut self, packet: &Packet) -> Result<(), StreamError> {
        self.receive(packet)?;
        self.hint(packet);
        Ok(())
    }

    fn receive(&mut self, packet: &Packet) -> Result<(), StreamError> {
        let now = self.now;
        let receiver = self.side(packet.from.peer());
        for frame in parse_frames(&packet.bytes) {
            receiver.handle_frame(now, &frame.expect("we encode valid frames"))?;
        }
        Ok(())
    }

    fn hint(&mut self, packet: &Packet) {
        let sender = self.side(packet.from);
        for chunk in &packet.chunks {
            sender.on_chunk_delivered_hint(chunk);
        }
    }

    fn lose(&mut self, packet: &Packet) {
        let sender = self.side(packet.from);
        for chunk in &packet.chunks {
            sender.on_chunk_lost(chunk);
        }
    }

    /// Exchanges packets over a perfect network until neither side has anything to send, letting time pass until
    /// delayed STREAM_ACKs are due.
    fn drive(&mut self) {
        for _ in 0..100_000 {
            let mut quiet = true;
            for from in [Side::Client, Side::Server] {
                while let Some(packet) = self.transmit(from, MTU) {
                    quiet = false;
                    self.deliver(&packet).expect("no protocol violation");
                }
            }
            let acks_due = [&self.client, &self.server].into_iter().filter_map(|s| s.stream_ack_deadline()).min();
            match acks_due {
                Some(due) if quiet => self.now = self.now.max(due),
                None if quiet => return,
                _ => {}
            }
        }
        panic!("the pair never went quiet");
    }

    fn advance(&mut self, by: Duration) {
        self.now += by;
        let now = self.now;
        for side in [Side::Client, Side::Server] {
            self.side(side).on_timeout(now, RTO);
        }
    }
}

/// Reads until `Blocked`, `Finished` or `Reset`: the bytes and how reading ended.
fn read_available(streams: &mut Streams, id: StreamId) -> (Vec<u8>, ReadOutcome) {
    let mut out = Vec::new();
    let mut buf = [0u8; 500];
    loop {
        match streams.read(id, &mut buf).expect("readable stream") {
            ReadOutcome::Data(n) => out.extend_from_slice(&buf[..n]),
            end => return (out, end),
        }
    }
}

fn events(streams: &mut Streams) -> Vec<StreamEvent> {
    std::iter::from_fn(|| streams.poll_event()).collect()
}

fn stream_frame(stream_id: u64, offset: u64, data: &[u8], fin: bool) -> Frame<'_> {
    Frame::Stream { stream_id, offset, fin, data, to_end: false }
}
