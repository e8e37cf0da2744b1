//! tng wire format codec: the flow header, packets and frames of `docs/wire-format.md`.
//!
//! Sans-IO and allocation-light: parsing borrows from the datagram, encoding appends to a caller's `Vec<u8>`.
//! Nothing here panics on any received bytes; every malformed input maps to one [`WireError`].
//!
//! ```
//! use tng_wire::{parse_frames, Feedback, Flags, Frame, Packet, Payload};
//!
//! // A DATA packet; its sealed payload is opaque at this layer (the AEAD lives in the transport core).
//! let sealed = [0u8; 16];
//! let packet = Packet {
//!     flags: Flags::ECN_CAPABLE,
//!     channel_id: 1,
//!     connection_id: 7,
//!     packet_number: 42,
//!     feedback: Feedback::NEUTRAL,
//!     payload: Payload::Data(&sealed),
//! };
//! let mut datagram = Vec::new();
//! packet.encode(&mut datagram)?;
//! assert_eq!(Packet::parse(&datagram)?, packet);
//!
//! // The frames of a plaintext, once opened.
//! let mut plaintext = Vec::new();
//! Frame::Ping.encode(&mut plaintext);
//! Frame::MaxData(1 << 20).encode(&mut plaintext);
//! let frames = parse_frames(&plaintext).collect::<Result<Vec<_>, _>>()?;
//! assert_eq!(frames, [Frame::Ping, Frame::MaxData(1 << 20)]);
//! # Ok::<(), tng_wire::WireError>(())
//! ```

#![forbid(unsafe_code)]

mod error;
pub mod feedback;
pub mod frame;
pub mod header;
pub mod limits;
pub mod packet;
pub mod pn;
mod reader;
pub mod section;
pub mod varint;

pub use error::WireError;
pub use feedback::Feedback;
pub use frame::{parse_frames, AckFrame, EcnCounts, Frame, Frames, PathStatus};
pub use header::{Flags, FlowHeader, PacketType, ASSOCIATED_DATA_LEN};
pub use limits::{
    DEFAULT_PORT, HEADER_LEN, MAX_PACKET, MAX_SECTION_INNER, MIN_CLIENT_INITIAL, SECTION_PREFIX_LEN, SECTION_VERSION,
    TAG_LEN, VERSION,
};
pub use packet::{rewrite_feedback, Handshake, Packet, Payload, Stage};
pub use section::Section;
