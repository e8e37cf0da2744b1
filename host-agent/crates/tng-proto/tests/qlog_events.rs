//! The qlog event sink: what a connection emits matches what it did (its counters), through handshake, two lossy
//! paths, migration and a policy change.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{payload, Pair, PathConfig};
use tng_proto::qlog::{
    ConnectionState, LossTrigger, MigrationState, QlogConfig, QlogEvent, QlogFactory, QlogSink, TraceStart,
};
use tng_proto::streams::Side;
use tng_proto::{CcKind, EndpointConfig, HostPolicy, Time, TransportConfig};
use tng_wire::Frame;

/// One recorded event, reduced to what the tests compare.
#[derive(Clone, Debug, PartialEq)]
enum Seen {
    Sent { channel: u8, packet_type: &'static str, stream_frames: usize },
    Received { channel: u8, packet_type: &'static str },
    Lost { channel: u8, trigger: LossTrigger },
    Metrics { channel: u8 },
    State(ConnectionState),
    IdUpdated,
    Controller { channel: u8, controller: &'static str, trigger: &'static str },
    Migration { channel: u8, state: MigrationState },
    Channel { channel: u8 },
    Other,
}

type Log = Arc<Mutex<Vec<(Side, Time, Seen)>>>;

struct Recorder {
    side: Side,
    log: Log,
}

impl QlogSink for Recorder {
    fn emit(&mut self, now: Time, event: &QlogEvent<'_>) {
        let seen = match event {
            QlogEvent::PacketSent { channel, packet_type, frames, .. } => Seen::Sent {
                channel: *channel,
                packet_type: packet_type.name(),
                stream_frames: frames.iter().filter(|f| matches!(f, Frame::Stream { .. })).count(),
            },
            QlogEvent::PacketReceived { channel, packet_type, .. } => {
                Seen::Received { channel: *channel, packet_type: packet_type.name() }
            }
            QlogEvent::PacketLost { channel, trigger, .. } => Seen::Lost { channel: *channel, trigger: *trigger },
            QlogEvent::MetricsUpdated(metrics) => Seen::Metrics { channel: metrics.channel },
            QlogEvent::ConnectionStateUpdated(state) => Seen::State(*state),
            QlogEvent::ConnectionIdUpdated { .. } => Seen::IdUpdated,
            QlogEvent::ControllerUpdated { channel, controller, trigger } => {
                Seen::Controller { channel: *channel, controller, trigger }
            }
            QlogEvent::MigrationStateUpdated { channel, state, .. } => {
                Seen::Migration { channel: *channel, state: *state }
            }
            QlogEvent::ChannelUpdated { channel, .. } | QlogEvent::ChannelRemoved { channel } => {
                Seen::Channel { channel: *channel }
            }
            _ => Seen::Other,
        };
        self.log.lock().expect("log").push((self.side, now, seen));
    }
}

struct RecordingFactory(Log);

impl QlogFactory for RecordingFactory {
    fn start(&self, trace: &TraceStart) -> Option<Box<dyn QlogSink>> {
        Some(Box::new(Recorder { side: trace.side, log: self.0.clone() }))
    }
}

fn traced_pair(paths: Vec<PathConfig>, seed: u64) -> (Pair, Log) {
    let log: Log = Arc::default();
    let transport = TransportConfig {
        qlog: Some(QlogConfig(Arc::new(RecordingFactory(log.clone())))),
        ..TransportConfig::default()
    };
    let client = EndpointConfig { transport: transport.clone(), ..EndpointConfig::client() };
    let server = EndpointConfig { transport, ..EndpointConfig::server() };
    (Pair::new(client, server, paths, seed), log)
}

fn events(log: &Log, side: Side) -> Vec<Seen> {
    log.lock().expect("log").iter().filter(|(s, _, _)| *s == side).map(|(_, _, seen)| seen.clone()).collect()
}

#[test]
fn every_datagram_and_loss_is_traced_over_two_lossy_paths() {
    let (mut pair, log) = traced_pair(vec![PathConfig::lossy(10, 0.03, 4), PathConfig::lossy(30, 0.03, 10)], 21);
    let (client, server) = pair.connect_and_wait();
    let data = payload(400_000, 7);
    pair.server_send(server, data.clone());
    assert!(pair.run_until(Duration::from_secs(60), |pair| pair.client_got(&data)), "transfer incomplete");

    for (side, endpoint, handle) in [(Side::Client, &pair.client, client), (Side::Server, &pair.server, server)] {
        let seen = events(&log, side);
        let stats = endpoint.connection_stats(handle).expect("connection");
        let sent = seen.iter().filter(|e| matches!(e, Seen::Sent { .. })).count() as u64;
        assert_eq!(sent, endpoint.stats().datagrams_sent, "{side:?}: one packet_sent per datagram");
        let received = seen.iter().filter(|e| matches!(e, Seen::Received { .. })).count() as u64;
        let sealed_received: u64 = stats.channels.iter().map(|c| c.packets_received).sum();
        assert_eq!(received, sealed_received, "{side:?}: one packet_received per sealed packet accepted");
        for channel in &stats.channels {
            let lost = seen.iter().filter(|e| matches!(e, Seen::Lost { channel: c, .. } if *c == channel.id)).count();
            assert_eq!(lost as u64, channel.lost_packets, "{side:?} channel {}: one packet_lost per loss", channel.id);
        }
        assert!(seen.contains(&Seen::State(ConnectionState::HandshakeComplete)), "{side:?}");
        for channel in [0, 1] {
            assert!(seen.contains(&Seen::Channel { channel }), "{side:?}: channel {channel} changes traced");
        }
        // Channel 1 is validated by PATH_CHALLENGE at both ends (channel 0 by the handshake).
        for state in [MigrationState::ProbingStarted, MigrationState::ProbingSuccessful] {
            assert!(seen.contains(&Seen::Migration { channel: 1, state }), "{side:?}: {state:?} on channel 1");
        }
    }
    let server_seen = events(&log, Side::Server);
    let stream_packets = server_seen.iter().filter(|e| matches!(e, Seen::Sent { stream_frames: 1.., .. })).count();
    assert!(stream_packets > 200, "the download's STREAM frames are in the server's packet_sent events");
    for channel in [0, 1] {
        assert!(server_seen.contains(&Seen::Metrics { channel }), "the sender's metrics on channel {channel}");
        assert!(server_seen.iter().any(|e| matches!(e, Seen::Lost { channel: c, .. } if *c == channel)));
    }
    assert!(events(&log, Side::Client).contains(&Seen::IdUpdated), "the client learns the server's id");
    let initials =
        events(&log, Side::Client).iter().filter(|e| matches!(e, Seen::Sent { packet_type: "initial", .. })).count();
    assert_eq!(initials, 2, "stage 1 and stage 3");
}

#[test]
fn migration_and_policy_changes_are_traced() {
    let (mut pair, log) = traced_pair(vec![PathConfig { rate: Some(1_000_000), ..PathConfig::clean(15) }], 22);
    let (client, _server) = pair.connect_and_wait();
    let data = payload(300_000, 8);
    pair.client_send(client, data.clone());
    pair.run_for(Duration::from_millis(200));
    pair.move_client_path(0, common::addr("10.1.50.2:6000"));
    assert!(pair.run_until(Duration::from_secs(30), |pair| pair.server_got(&data)), "transfer stalled");
    let server_seen = events(&log, Side::Server);
    for state in [MigrationState::ProbingStarted, MigrationState::ProbingSuccessful, MigrationState::MigrationComplete]
    {
        assert!(server_seen.contains(&Seen::Migration { channel: 0, state }), "server: {state:?}");
    }
    let client_seen = events(&log, Side::Client);
    let restarted = Seen::Controller { channel: 0, controller: "cubic", trigger: "path_change" };
    assert!(client_seen.contains(&restarted), "the client's channel restarts its flow state on the new address");

    let policy = HostPolicy { cc: Some(CcKind::Bbr), ..HostPolicy::default() };
    pair.client.connection(client).expect("connection").set_policy(policy);
    let changed = Seen::Controller { channel: 0, controller: "bbr", trigger: "policy" };
    assert!(events(&log, Side::Client).contains(&changed));
}
