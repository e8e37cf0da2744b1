//! tng transport core: a sans-IO multipath protocol.
//!
//! A pure state machine: callers pass `now`, incoming datagrams and timer expiries, and poll for datagrams to send,
//! the next timeout and application events. No sockets, no clock, no panics on any input.

pub mod alcc;
pub mod cc;
pub mod config;
pub mod connection;
pub mod endpoint;
pub mod error;
pub mod identity;
pub mod qlog;
mod retry;
pub mod scheduler;
pub mod signing;
pub mod streams;
pub mod time;

pub use cc::CcKind;
pub use config::{EndpointConfig, HostPolicy, RetryPolicy, ServerConfig, TailLossMode, TransportConfig};
pub use connection::{
    ChannelState, ChannelStats, Connection, ConnectionHandle, ConnectionStats, Datagram, EcnCodepoint, Event, Transmit,
};
pub use endpoint::{Endpoint, EndpointStats};
pub use error::{ConnectError, ConnectionError};
pub use identity::{Identity, StaticKeypair};
pub use retry::TOKEN_LIFETIME;
pub use scheduler::SchedulerKind;
pub use streams::{ReadOutcome, StreamConfig, StreamError, StreamId};
pub use time::Time;
