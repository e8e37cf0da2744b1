//! ALCC's client half, for the controller that needs one: Sprout forecasts the link at the receiver (ALCC's
//! "client+server" library). A TCP receiver sends no forecast, so the receiving application runs Sprout's
//! forecaster on the bytes it reads and sends each forecast back on the same connection, as a message in the
//! otherwise idle client-to-server direction; the server hands it to its [`super::AlccSender`]. Sans-IO: the caller
//! reads, writes and passes `now`.
//!
//! A forecast message is a 2-byte big-endian length and one DELIVERY_FORECAST frame, encoded as tng's wire format
//! encodes it (docs/wire-format.md): the frame, not a second format, is the one definition of a forecast's bytes.

use tng_wire::{parse_frames, Frame};

use crate::cc::{DeliveryForecast, DeliveryForecaster};
use crate::time::Time;

/// Longest forecast message payload accepted: a frame of 8 varints of at most 8 bytes and its header fit easily.
const MAX_MESSAGE: usize = 256;

/// The receiving application's forecaster: arrivals are counted in segments of the sender's MSS, as the link
/// delivers them (an application read returns several at once; they arrived within the same read interval).
#[derive(Debug)]
pub struct AlccReceiver {
    forecaster: DeliveryForecaster,
    mss: u64,
    /// Bytes read that do not yet make a whole segment.
    partial: u64,
    /// A tick ended since the last forecast was taken.
    due: bool,
}

impl AlccReceiver {
    /// A receiver of segments of `mss` bytes, its first tick starting at `now`.
    pub fn new(mss: u32, now: Time) -> AlccReceiver {
        AlccReceiver { forecaster: DeliveryForecaster::new(now), mss: u64::from(mss.max(1)), partial: 0, due: false }
    }

    /// The application read `bytes` at `now`.
    pub fn on_read(&mut self, now: Time, bytes: u64) {
        self.partial += bytes;
        while self.partial >= self.mss {
            self.partial -= self.mss;
            self.due |= self.forecaster.on_arrival(now);
        }
        self.due |= self.forecaster.advance_to(now);
    }

    /// When the current tick ends: the next forecast is due then, whether or not bytes arrive.
    pub fn next_forecast_at(&self) -> Time {
        self.forecaster.tick_end()
    }

    /// The forecast message to send at `now`, if a tick ended since the last one.
    pub fn poll_message(&mut self, now: Time) -> Option<Vec<u8>> {
        self.due |= self.forecaster.advance_to(now);
        if !std::mem::take(&mut self.due) {
            return None;
        }
        let forecast = self.forecaster.forecast();
        let frame = Frame::DeliveryForecast {
            tick: forecast.tick,
            received: forecast.received,
            cumulative: forecast.cumulative,
        };
        let mut message = vec![0; 2];
        frame.encode(&mut message);
        let len = u16::try_from(message.len() - 2).expect("a forecast frame is a few dozen bytes");
        message[..2].copy_from_slice(&len.to_be_bytes());
        Some(message)
    }
}

/// A message in the client-to-server direction that is not a forecast.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadForecastMessage(pub String);

impl std::fmt::Display for BadForecastMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "bad ALCC forecast message: {}", self.0)
    }
}

impl std::error::Error for BadForecastMessage {}

/// The server's side of the forecast messages: takes the bytes as they are read, in pieces of any size, and
/// yields the forecasts they complete.
#[derive(Debug, Default)]
pub struct ForecastMessages {
    pending: Vec<u8>,
}

impl ForecastMessages {
    /// Adds `bytes` read from the connection and returns the forecasts of every message they complete, in order.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<DeliveryForecast>, BadForecastMessage> {
        self.pending.extend_from_slice(bytes);
        let mut forecasts = Vec::new();
        while let Some(header) = self.pending.get(..2) {
            let len = usize::from(u16::from_be_bytes([header[0], header[1]]));
            if len == 0 || len > MAX_MESSAGE {
                return Err(BadForecastMessage(format!("length {len} (1 to {MAX_MESSAGE})")));
            }
            let Some(body) = self.pending.get(2..2 + len) else { break };
            forecasts.push(decode(body)?);
            self.pending.drain(..2 + len);
        }
        Ok(forecasts)
    }
}

fn decode(body: &[u8]) -> Result<DeliveryForecast, BadForecastMessage> {
    let mut frames = parse_frames(body);
    match (frames.next(), frames.next()) {
        (Some(Ok(Frame::DeliveryForecast { tick, received, cumulative })), None) => {
            Ok(DeliveryForecast { tick, received, cumulative })
        }
        (Some(Ok(frame)), None) => Err(BadForecastMessage(format!("a {frame:?} frame, not DELIVERY_FORECAST"))),
        (Some(Err(err)), _) => Err(BadForecastMessage(format!("{err}"))),
        (None, _) => Err(BadForecastMessage("no frame".to_owned())),
        (Some(Ok(_)), Some(_)) => Err(BadForecastMessage("more than one frame".to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::cc::FORECAST_TICK;

    const MSS: u32 = 1000;

    /// Reads `rate` segments per second in reads of 4 segments for `seconds`, from `start`; returns the messages.
    fn feed(receiver: &mut AlccReceiver, start: Time, rate: u64, seconds: u64) -> Vec<Vec<u8>> {
        let reads = rate * seconds / 4;
        let gap = Duration::from_secs(seconds) / u32::try_from(reads).unwrap();
        let mut messages = Vec::new();
        for i in 0..reads {
            let now = start + gap * u32::try_from(i).unwrap();
            receiver.on_read(now, 4 * u64::from(MSS));
            messages.extend(receiver.poll_message(now));
        }
        messages
    }

    fn decoded(messages: &[Vec<u8>]) -> Vec<DeliveryForecast> {
        let mut server = ForecastMessages::default();
        messages.iter().flat_map(|m| server.push(m).expect("well-formed")).collect()
    }

    #[test]
    fn one_forecast_per_tick_and_each_says_what_the_link_delivered() {
        let mut receiver = AlccReceiver::new(MSS, Time::ZERO);
        let messages = feed(&mut receiver, Time::ZERO, 800, 2);
        let ticks = (Duration::from_secs(2).as_nanos() / FORECAST_TICK.as_nanos()) as usize;
        assert!(messages.len() + 1 >= ticks && messages.len() <= ticks, "{} messages in {ticks} ticks", messages.len());
        let forecasts = decoded(&messages);
        let last = forecasts.last().unwrap();
        assert!(forecasts.windows(2).all(|pair| pair[0].tick < pair[1].tick), "ticks increase");
        // The last message went with the read at 1.98 s, when tick 99 ended: 397 reads of 4 segments by then.
        assert_eq!(last.received, 397 * 4, "every segment read counts: {last:?}");
        // 800 segments/s is 16 per 20 ms tick; the cautious forecast over 8 ticks is below 128 but not far.
        let over_8_ticks = *last.cumulative.last().unwrap();
        assert!((60..=128).contains(&over_8_ticks), "{last:?}");
    }

    #[test]
    fn silence_still_sends_forecasts_and_they_fall() {
        let mut receiver = AlccReceiver::new(MSS, Time::ZERO);
        let busy = decoded(&feed(&mut receiver, Time::ZERO, 800, 2));
        let quiet_at = Time::ZERO + Duration::from_millis(2500);
        assert!(receiver.next_forecast_at() <= quiet_at);
        let quiet = decoded(&receiver.poll_message(quiet_at).into_iter().collect::<Vec<_>>());
        assert_eq!(quiet.len(), 1, "a tick ended, so a forecast is due without a read");
        assert!(quiet[0].cumulative.last() < busy.last().unwrap().cumulative.last(), "{quiet:?}");
        assert_eq!(receiver.poll_message(quiet_at), None, "one per tick");
    }

    #[test]
    fn messages_split_anywhere_arrive_whole_and_in_order() {
        let mut receiver = AlccReceiver::new(MSS, Time::ZERO);
        let messages = feed(&mut receiver, Time::ZERO, 400, 1);
        let stream: Vec<u8> = messages.concat();
        let mut server = ForecastMessages::default();
        let mut forecasts = Vec::new();
        for piece in stream.chunks(3) {
            forecasts.extend(server.push(piece).unwrap());
        }
        assert_eq!(forecasts, decoded(&messages));
        assert!(!forecasts.is_empty());
    }

    #[test]
    fn anything_but_a_forecast_is_an_error_naming_the_problem() {
        let mut server = ForecastMessages::default();
        let err = server.push(&[0, 0]).unwrap_err();
        assert!(err.to_string().contains("length 0"), "{err}");
        let mut ping = vec![0, 0];
        Frame::Ping.encode(&mut ping);
        let len = (ping.len() - 2) as u16;
        ping[..2].copy_from_slice(&len.to_be_bytes());
        let err = ForecastMessages::default().push(&ping).unwrap_err();
        assert!(err.to_string().contains("not DELIVERY_FORECAST"), "{err}");
    }
}
