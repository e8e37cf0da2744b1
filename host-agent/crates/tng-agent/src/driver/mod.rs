//! The daemon's event loop: one task owns the sans-IO `Endpoint` and moves datagrams, timers and application
//! requests in and out of it. Everything else talks to it through an [`Agent`] handle.
//!
//! `handle` is the application's side (the [`Agent`] and its [`Stream`]s), `command` the requests they send,
//! `event_loop` the task that owns the endpoint.

mod command;
mod event_loop;
mod handle;

use std::time::Duration;

use anyhow::{bail, Result};

pub use command::Status;
pub use handle::{Agent, Stream};

/// Bytes the driver reads from a stream per application read.
const READ_CHUNK: usize = 64 * 1024;

/// Fails with a readable message when a connection attempt does not finish in time.
pub async fn with_timeout<T>(
    what: &str,
    limit: Duration,
    future: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    match tokio::time::timeout(limit, future).await {
        Ok(result) => result,
        Err(_) => bail!("{what} did not finish within {} s", limit.as_secs_f64()),
    }
}
