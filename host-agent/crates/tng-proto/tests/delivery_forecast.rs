//! Sprout's feedback loop through two endpoints: the receiving side of a sprout channel sends a DELIVERY_FORECAST
//! every 20 ms tick while data arrives, the sending side's controller takes it, and the forecasts stop once the
//! channel goes quiet; other controllers send none.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{payload, Pair, PathConfig};
use tng_proto::qlog::{QlogConfig, QlogEvent, QlogFactory, QlogSink, TraceStart};
use tng_proto::streams::Side;
use tng_proto::{CcKind, EndpointConfig, Time, TransportConfig};
use tng_wire::Frame;

/// Ticks of the DELIVERY_FORECAST frames one side sent or received, with the time.
type Log = Arc<Mutex<Vec<(Side, bool, Time, u64)>>>;

struct Recorder {
    side: Side,
    log: Log,
}

impl QlogSink for Recorder {
    fn emit(&mut self, now: Time, event: &QlogEvent<'_>) {
        let (sent, frames) = match event {
            QlogEvent::PacketSent { frames, .. } => (true, frames),
            QlogEvent::PacketReceived { frames, .. } => (false, frames),
            _ => return,
        };
        for frame in frames.iter() {
            if let Frame::DeliveryForecast { tick, .. } = frame {
                self.log.lock().expect("log").push((self.side, sent, now, *tick));
            }
        }
    }
}

struct RecordingFactory(Log);

impl QlogFactory for RecordingFactory {
    fn start(&self, trace: &TraceStart) -> Option<Box<dyn QlogSink>> {
        Some(Box::new(Recorder { side: trace.side, log: self.0.clone() }))
    }
}

/// A download of 3 MB over a 2.5 MB/s, 20 ms path with both ends running `cc`; returns the log, when the download
/// ended, and the pair.
fn download(cc: CcKind) -> (Log, Time, Pair) {
    let log: Log = Arc::default();
    let transport =
        TransportConfig { cc, qlog: Some(QlogConfig(Arc::new(RecordingFactory(log.clone())))), ..Default::default() };
    let client = EndpointConfig { transport: transport.clone(), ..EndpointConfig::client() };
    let server = EndpointConfig { transport, ..EndpointConfig::server() };
    let path = PathConfig { rate: Some(2_500_000), ..PathConfig::clean(10) };
    let mut pair = Pair::new(client, server, vec![path], 41);
    let (_, server_handle) = pair.connect_and_wait();
    let data = payload(3_000_000, 5);
    pair.server_send(server_handle, data.clone());
    assert!(pair.run_until(Duration::from_secs(30), |pair| pair.client_got(&data)), "{cc}: download incomplete");
    let done = pair.now;
    pair.run_for(Duration::from_secs(3));
    (log, done, pair)
}

#[test]
fn the_receiver_forecasts_every_tick_while_data_arrives_and_the_sender_takes_it() {
    let (log, done, pair) = download(CcKind::Sprout);
    let log = log.lock().expect("log").clone();
    let sent: Vec<(Time, u64)> = log
        .iter()
        .filter(|(side, sent, _, _)| *side == Side::Client && *sent)
        .map(|&(_, _, t, tick)| (t, tick))
        .collect();
    let received = log.iter().filter(|(side, sent, _, _)| *side == Side::Server && !*sent).count();
    let server_sent = log.iter().filter(|(side, sent, _, _)| *side == Side::Server && *sent).count();
    assert_eq!(server_sent, 0, "the sending side forecasts nothing: it receives only ACKs");
    let (first, last) = (sent.first().expect("forecasts").0, sent.last().expect("forecasts").0);
    // One per tick from the first data to a second after the last.
    let ticks = (last - first).as_millis() / 20;
    assert!(
        sent.len() as u128 >= ticks * 9 / 10 && sent.len() as u128 <= ticks + 1,
        "{} forecasts in {ticks} ticks",
        sent.len()
    );
    assert!(sent.windows(2).all(|pair| pair[0].1 < pair[1].1), "ticks increase");
    assert!(last > done && last - done <= Duration::from_millis(1_100), "forecasts stop a second after the data");
    assert!(received >= sent.len() * 9 / 10, "server took {received} of {} forecasts", sent.len());
    assert!(pair.now - last >= Duration::from_secs(1));
}

#[test]
fn other_controllers_send_no_forecast() {
    let (log, _, _) = download(CcKind::Cubic);
    assert!(log.lock().expect("log").is_empty());
}
