//! qlog traces of tng connections: the JSON-SEQ writer behind `tng-proto`'s event sink.
//!
//! One file per connection end, `DIR/<original connection id>-<client|server>.sqlog`: a header record (qlog 0.3,
//! `qlog_format: "JSON-SEQ"`, one trace with its vantage point and common fields) and one record per event, each
//! starting with the RFC 7464 record separator (0x1E) and ending with a line feed, as qvis loads them. Event names
//! are those of the IETF qlog drafts for QUIC (`transport:packet_sent`, `recovery:metrics_updated`, ...) plus
//! `tng:` events for channels, controllers and in-network feedback; `docs/observability.md` lists them all and
//! `testdata/qlog/tng-qlog.schema.json` is their schema.

mod dir;
mod events;
mod writer;

pub use dir::{Clock, QlogDir};
pub use writer::{QlogWriter, QLOG_VERSION};
