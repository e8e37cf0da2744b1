//! What can go wrong in the semantic layer: local misuse of the stream API, and peer protocol violations.

use tng_wire::varint;

use super::id::StreamId;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    // --- Local API errors: the connection stays healthy.
    #[error("stream {0} is not open")]
    NotOpen(StreamId),
    #[error("stream {0} is closed")]
    Closed(StreamId),
    #[error("the peer allows at most {limit} streams opened by us; wait for it to raise the limit")]
    StreamLimit { limit: u64 },
    #[error("stream {0} cannot take more data now (send buffer full); wait for Writable")]
    Blocked(StreamId),
    #[error("stream {0} was finished or reset; it takes no more data")]
    SendClosed(StreamId),
    #[error("the peer asked us to stop sending on stream {id} (error code {error_code})")]
    Stopped { id: StreamId, error_code: u64 },
    #[error("reading from stream {0} was stopped")]
    ReadStopped(StreamId),
    #[error("error code {0} does not fit in a varint (at most 2^62 - 1)")]
    ErrorCodeTooLarge(u64),

    // --- Peer protocol violations: the connection should be closed.
    #[error("peer exceeded connection flow-control limit: {received} > {limit}")]
    ConnectionFlowControl { received: u64, limit: u64 },
    #[error("peer exceeded flow-control limit of stream {id}: {received} > {limit}")]
    StreamFlowControl { id: StreamId, received: u64, limit: u64 },
    #[error("peer violated the final size of stream {id}: final size {final_size}, data up to offset {offset}")]
    FinalSize { id: StreamId, final_size: u64, offset: u64 },
    #[error("peer opened stream {id} beyond its limit of {limit} streams")]
    StreamLimitViolation { id: StreamId, limit: u64 },
    #[error("peer referenced stream {0}, which we never opened")]
    UnopenedStream(StreamId),
    #[error("peer acknowledged stream {id} up to offset {end}, but we sent only up to {sent}")]
    AckOfUnsentData { id: StreamId, end: u64, sent: u64 },
    #[error("peer sent an inverted acknowledgement range {start}..{end} for stream {id}")]
    InvalidAckRange { id: StreamId, start: u64, end: u64 },
    #[error("peer left more than {limit} gaps in the reassembly of stream {id}")]
    TooManyGaps { id: StreamId, limit: usize },
}

impl StreamError {
    /// Whether the error is the peer's fault: the connection should be closed with a protocol error.
    pub fn is_peer_violation(&self) -> bool {
        matches!(
            self,
            StreamError::ConnectionFlowControl { .. }
                | StreamError::StreamFlowControl { .. }
                | StreamError::FinalSize { .. }
                | StreamError::StreamLimitViolation { .. }
                | StreamError::UnopenedStream(_)
                | StreamError::AckOfUnsentData { .. }
                | StreamError::InvalidAckRange { .. }
                | StreamError::TooManyGaps { .. }
        )
    }
}

pub(super) fn check_error_code(error_code: u64) -> Result<(), StreamError> {
    if error_code <= varint::MAX {
        Ok(())
    } else {
        Err(StreamError::ErrorCodeTooLarge(error_code))
    }
}
