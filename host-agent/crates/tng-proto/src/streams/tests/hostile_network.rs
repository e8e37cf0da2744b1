//! Property test: a lossy, reordering, duplicating network with in-path boxes that acknowledge packets and then
//! drop them, and applications on both sides.

use super::*;

/// How the simulated network treats each packet.
#[derive(Clone, Copy, Debug)]
struct Network {
    /// Dropped, and the flow layer reports it lost.
    loss: f64,
    /// Dropped after an in-path box acknowledged it: the flow layer reports it delivered.
    black_hole: f64,
    /// Delivered, but the flow layer reports it lost.
    spurious_loss: f64,
    /// Delivered twice.
    duplicate: f64,
}

/// One stream's plan: which side opens it and what it writes.
#[derive(Clone, Debug)]
struct Plan {
    opener: Side,
    writes: Vec<usize>,
}

fn pattern(opener: Side, plan: usize, offset: usize) -> u8 {
    (offset.wrapping_mul(31) ^ plan.wrapping_mul(97) ^ (opener as usize) << 7) as u8
}

struct Simulation {
    pair: Pair,
    rng: ChaCha8Rng,
    network: Network,
    /// Packets in flight: (arrival time, packet).
    in_flight: Vec<(Time, Packet)>,
    /// Flow-layer verdicts to come: (time, packet, lost).
    verdicts: Vec<(Time, Packet, bool)>,
    plans: Vec<Plan>,
    /// Per plan: the stream id once opened, bytes written, finished.
    opened: Vec<Option<StreamId>>,
    written: Vec<usize>,
    finished_writing: Vec<bool>,
    /// What each side read, per stream id, and whether it saw the end.
    read: BTreeMap<(Side, StreamId), (Vec<u8>, bool)>,
    /// Streams the writer saw `Finished` for.
    acked_end_to_end: Vec<(Side, StreamId)>,
}

impl Simulation {
    fn chance(&mut self, p: f64) -> bool {
        (self.rng.next_u64() as f64 / u64::MAX as f64) < p
    }

    fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.rng.next_u64() % (high - low + 1)
    }

    fn total(plan: &Plan) -> usize {
        plan.writes.iter().sum()
    }

    /// The applications: open, write, finish, accept, read.
    fn run_applications(&mut self) {
        let now = self.pair.now;
        for (index, plan) in self.plans.clone().iter().enumerate() {
            let streams = self.pair.side(plan.opener);
            let id = match self.opened[index] {
                Some(id) => id,
                None => match streams.open() {
                    Ok(id) => {
                        self.opened[index] = Some(id);
                        id
                    }
                    Err(StreamError::StreamLimit { .. }) => continue,
                    Err(e) => panic!("open: {e}"),
                },
            };
            let total = Simulation::total(plan);
            while self.written[index] < total {
                let chunk_end = (self.written[index] + 700).min(total);
                let data: Vec<u8> =
                    (self.written[index]..chunk_end).map(|offset| pattern(plan.opener, index, offset)).collect();
                match streams.write(now, id, &data) {
                    Ok(n) => self.written[index] += n,
                    Err(StreamError::Blocked(_)) => break,
                    Err(e) => panic!("write: {e}"),
                }
            }
            if self.written[index] == total && !self.finished_writing[index] {
                streams.finish(id).unwrap();
                self.finished_writing[index] = true;
            }
        }
        for side in [Side::Client, Side::Server] {
            let streams = self.pair.side(side);
            while let Some(id) = streams.accept() {
                // Peer-opened streams carry data one way: our half ends at once.
                streams.finish(id).unwrap();
                self.read.insert((side, id), (Vec::new(), false));
            }
        }
        self.collect_events();
        for (index, plan) in self.plans.iter().enumerate() {
            if let Some(id) = self.opened[index] {
                self.read.entry((plan.opener, id)).or_default();
            }
        }
        let mut buf = [0u8; 333];
        for ((side, id), (data, ended)) in self.read.iter_mut() {
            let streams = match side {
                Side::Client => &mut self.pair.client,
                Side::Server => &mut self.pair.server,
            };
            while !*ended {
                match streams.read(*id, &mut buf) {
                    Ok(ReadOutcome::Data(n)) => data.extend_from_slice(&buf[..n]),
                    Ok(ReadOutcome::Finished) => *ended = true,
                    Ok(ReadOutcome::Blocked) => break,
                    other => panic!("read {id:?} on {side:?}: {other:?}"),
                }
            }
        }
    }

    fn collect_events(&mut self) {
        for side in [Side::Client, Side::Server] {
            while let Some(event) = self.pair.side(side).poll_event() {
                if let StreamEvent::Finished(id) = event {
                    self.acked_end_to_end.push((side, id));
                }
            }
        }
    }

    fn send_packets(&mut self) {
        let now = self.pair.now;
        for from in [Side::Client, Side::Server] {
            for _ in 0..8 {
                let max_len = self.between(30, MTU as u64) as usize;
                let Some(packet) = self.pair.transmit(from, max_len) else { break };
                let delay = Duration::from_millis(self.between(5, 40));
                if self.chance(self.network.loss) {
                    self.verdicts.push((now + Duration::from_millis(60), packet, true));
                } else if self.chance(self.network.black_hole) {
                    self.verdicts.push((now + 2 * delay, packet, false));
                } else {
                    let lost = self.chance(self.network.spurious_loss);
                    if self.chance(self.network.duplicate) {
                        let again = Duration::from_millis(self.between(5, 80));
                        self.in_flight.push((now + again, packet.clone()));
                    }
                    self.in_flight.push((now + delay, packet.clone()));
                    self.verdicts.push((now + 2 * delay, packet, lost));
                }
            }
        }
    }

    fn deliver_due(&mut self) -> Result<(), TestCaseError> {
        let now = self.pair.now;
        let (due, later): (Vec<_>, Vec<_>) = self.in_flight.drain(..).partition(|(at, _)| *at <= now);
        self.in_flight = later;
        for (_, packet) in due {
            self.pair.receive(&packet).map_err(|e| TestCaseError::fail(format!("protocol violation: {e}")))?;
        }
        let (due, later): (Vec<_>, Vec<_>) = self.verdicts.drain(..).partition(|(at, _, _)| *at <= now);
        self.verdicts = later;
        for (_, packet, lost) in due {
            if lost {
                self.pair.lose(&packet);
            } else {
                self.pair.hint(&packet);
            }
        }
        Ok(())
    }

    /// Credit is never exceeded, and no byte is released before the receiver really has it.
    fn check_invariants(&self) -> Result<(), TestCaseError> {
        for (sender, receiver) in [(&self.pair.client, &self.pair.server), (&self.pair.server, &self.pair.client)] {
            prop_assert!(sender.data_sent <= receiver.max_data, "connection credit exceeded");
            for (id, stream) in &sender.streams {
                let Some(peer) = receiver.streams.get(id) else { continue };
                prop_assert!(stream.send.sent_end() <= peer.recv.limit(), "stream credit exceeded on {id:?}");
                prop_assert!(
                    stream.send.acked_offset() <= peer.recv.contiguous_end(),
                    "{id:?} released {} bytes but the receiver has only {}",
                    stream.send.acked_offset(),
                    peer.recv.contiguous_end()
                );
            }
        }
        Ok(())
    }

    fn done(&self) -> bool {
        self.opened.iter().all(Option::is_some)
            && self.read.values().all(|(_, ended)| *ended)
            && self.pair.client.stats().streams_open == 0
            && self.pair.server.stats().streams_open == 0
    }
}

fn plans() -> impl Strategy<Value = Vec<Plan>> {
    let plan = (any::<bool>(), prop::collection::vec(0usize..2500, 0..4))
        .prop_map(|(client, writes)| Plan { opener: if client { Side::Client } else { Side::Server }, writes });
    prop::collection::vec(plan, 1..6)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn hostile_network_delivers_exactly_what_was_written(
        seed in any::<u64>(),
        loss in 0.0..0.4f64,
        black_hole in 0.0..0.2f64,
        spurious_loss in 0.0..0.1f64,
        duplicate in 0.0..0.2f64,
        plans in plans(),
    ) {
        // Small windows and buffers, two streams at a time per side: every limit is hit.
        let config = StreamConfig {
            max_streams: 2,
            stream_receive_window: 1500,
            receive_window: 4000,
            stream_send_buffer: 3000,
            send_buffer: 5000,
            ..StreamConfig::default()
        };
        let count = plans.len();
        let mut sim = Simulation {
            pair: Pair::new(config.clone(), config),
            rng: ChaCha8Rng::seed_from_u64(seed),
            network: Network { loss, black_hole, spurious_loss, duplicate },
            in_flight: Vec::new(),
            verdicts: Vec::new(),
            plans,
            opened: vec![None; count],
            written: vec![0; count],
            finished_writing: vec![false; count],
            read: BTreeMap::new(),
            acked_end_to_end: Vec::new(),
        };
        for _ in 0..120_000 {
            sim.run_applications();
            sim.send_packets();
            sim.pair.now += Duration::from_millis(1);
            sim.deliver_due()?;
            let now = sim.pair.now;
            for side in [Side::Client, Side::Server] {
                let streams = sim.pair.side(side);
                if streams.next_timeout(RTO).is_some_and(|at| at <= now) {
                    streams.on_timeout(now, RTO);
                }
            }
            sim.check_invariants()?;
            if sim.done() {
                break;
            }
        }
        sim.collect_events();
        prop_assert!(sim.done(), "not done after 120 s: opened {:?}, read {:?}", sim.opened, sim.read.values().map(|(d, e)| (d.len(), *e)).collect::<Vec<_>>());

        for (index, plan) in sim.plans.iter().enumerate() {
            let id = sim.opened[index].expect("opened");
            let expected: Vec<u8> = (0..Simulation::total(plan)).map(|offset| pattern(plan.opener, index, offset)).collect();
            let (data, ended) = &sim.read[&(plan.opener.peer(), id)];
            prop_assert!(*ended);
            prop_assert_eq!(data, &expected, "stream {:?}", id);
            prop_assert!(sim.acked_end_to_end.contains(&(plan.opener, id)), "no Finished for {:?}", id);
            let (reverse, reverse_ended) = &sim.read[&(plan.opener, id)];
            prop_assert!(reverse.is_empty() && *reverse_ended);
        }
        for streams in [&sim.pair.client, &sim.pair.server] {
            let stats = streams.stats();
            prop_assert_eq!(stats.bytes_written, stats.bytes_acked);
            prop_assert_eq!(streams.buffered, 0);
        }
        prop_assert_eq!(sim.pair.client.stats().bytes_read, sim.pair.server.stats().bytes_written);
        prop_assert_eq!(sim.pair.server.stats().bytes_read, sim.pair.client.stats().bytes_written);
    }
}
