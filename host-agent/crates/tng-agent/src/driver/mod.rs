//! The daemon's event loop: one task owns the sans-IO `Endpoint` and moves datagrams, timers and application
//! requests in and out of it. Everything else talks to it through an [`Agent`] handle.
//!
//! `handle` is the application's side (the [`Agent`] and its [`Stream`]s), `stream_io` a stream as a socket,
//! `command` the requests they send, `event_loop` the task that owns the endpoint, `closed` why connections ended.

mod closed;
mod command;
mod event_loop;
mod handle;
mod send_batches;
mod stream_io;

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Result};
use tng_proto::{ConnectionHandle, Identity};

pub use command::Status;
pub use handle::{Agent, Stream};

/// Bytes the driver reads from a stream per application read.
const READ_CHUNK: usize = 64 * 1024;

/// How long a handshake may take before `Route::connect` gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A client's way to its server: the paths its agent bound (local, server) and the identity the server must prove.
/// Kept by clients that connect again when their connection is lost.
#[derive(Clone, Debug)]
pub struct Route {
    pub paths: Vec<(SocketAddr, SocketAddr)>,
    pub pin: Option<Identity>,
}

impl Route {
    /// A new connection over every path (handshake on the first), within `CONNECT_TIMEOUT`.
    pub async fn connect(&self, agent: &Agent) -> Result<ConnectionHandle> {
        let server = self.paths.first().map_or_else(|| "the server".to_owned(), |(_, server)| server.to_string());
        with_timeout(&format!("connecting to {server}"), CONNECT_TIMEOUT, agent.connect(self.paths.clone(), self.pin))
            .await
    }
}

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
