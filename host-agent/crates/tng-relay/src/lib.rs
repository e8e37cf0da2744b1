//! Sans-IO core of `tng relay`, Tng's flow middlebox (docs/architecture.md, "Relays"; wire-format section 10).
//!
//! A relay terminates the flow layer only: each section (sender -> relay, relay -> receiver) has its own packet
//! numbers, section ACKs and congestion controller, and carries the end-to-end packets unchanged inside SECTION
//! packets. The relay holds no key. Its queue is shared with the upstream section (a SECTION is acknowledged only
//! once its inner packet left downstream, and the queue is bounded), and its state is soft: losing it loses at most
//! the packets it held, which the end-to-end layer recovers.
//!
//! [`SectionSender`] and [`SectionReceiver`] are the two ends of one section, usable by a relay and by an endpoint
//! alike; [`Relay`] joins an upstream receiver to a downstream sender through a [`SectionQueue`], and
//! [`EndpointSections`] puts them between an endpoint and its sockets.

#![forbid(unsafe_code)]

mod endpoint_sections;
mod queue;
mod relay;
mod section_control;
mod section_receiver;
mod section_sender;

pub use endpoint_sections::{EndpointSections, Received, SectionState, SectionStats};
pub use queue::{QueueFull, SectionQueue};
pub use relay::{
    ConnectionState, DirectionState, Relay, RelayConfig, RelayStats, RelayTransmit, CONNECTION_IDLE, MAX_CONNECTIONS,
};
pub use section_control::{BadSectionControl, SectionControl};
pub use section_receiver::SectionReceiver;
pub use section_sender::SectionSender;
