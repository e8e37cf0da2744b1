//! `tng proxy`: forwards each local TCP connection over a stream of one tng connection to a TCP target behind the
//! server. What the proxy writes to its TCP client (the download) may run under an ALCC controller, as the perf
//! server's TCP sender does; what the client sends (the upload) is a plain copy.
//!
//! The proxy outlives its connection: once the connection is gone (closed, or timed out when the server restarted
//! and no longer knows it), the next client's stream is opened on a new one over the same route. Clients whose
//! streams were on the lost connection fail; nothing is carried over.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use tng_proto::alcc::AlccStats;
use tng_proto::{CcKind, ConnectionHandle};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;

use crate::alcc::{copy_governed, AlccSocket};
use crate::driver::{Agent, Route, Stream};
use crate::perf::kernel;
use crate::service;

/// Where a proxy forwards its clients, and how it writes to them.
pub struct Proxy {
    agent: Agent,
    route: Route,
    /// The connection new streams open on; replaced when it is lost. Held while a stream opens, so that clients
    /// arriving together after a loss wait for one new connection instead of each making one.
    conn: Mutex<ConnectionHandle>,
    /// The TCP target, as the server reaches it.
    target: SocketAddr,
    /// The ALCC controller of every client's download, if any (one of `tng_proto::alcc::ALCC_KINDS`).
    alcc: Option<CcKind>,
}

/// What one proxied connection carried.
struct Relayed {
    uploaded: u64,
    downloaded: u64,
    alcc: Option<AlccStats>,
}

/// Forwards every client of `listener` until interrupted. Under ALCC, each connection's end prints one line with
/// what the controller saw, like `tng perf`'s report.
pub async fn run(listener: TcpListener, proxy: Proxy) -> Result<()> {
    let proxy = Arc::new(proxy);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => accepted?,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        let proxy = proxy.clone();
        tokio::spawn(async move {
            match proxy.forward(tcp).await {
                Ok(relayed) => proxy.report(peer, &relayed),
                Err(err) => tracing::warn!("proxied connection from {peer}: {err:#}"),
            }
        });
    }
}

impl Proxy {
    pub fn new(agent: Agent, route: Route, conn: ConnectionHandle, target: SocketAddr, alcc: Option<CcKind>) -> Self {
        Proxy { agent, route, conn: Mutex::new(conn), target, alcc }
    }

    /// A stream on the current connection, or on a new one if that connection is gone.
    async fn open_stream(&self) -> Result<Stream> {
        let mut conn = self.conn.lock().await;
        let lost = match self.agent.open_stream(*conn).await {
            Ok(stream) => return Ok(stream),
            Err(err) => err,
        };
        eprintln!("tng proxy: {} lost ({lost:#}); connecting again", *conn);
        *conn = self.route.connect(&self.agent).await.context("cannot connect again")?;
        eprintln!("tng proxy: connected again ({})", *conn);
        self.agent.open_stream(*conn).await
    }

    /// Relays one client; if the tng side fails, the client's connection is reset rather than closed, so that a
    /// download cut short never looks complete to it (a clean close ends a body that has no length of its own).
    async fn forward(&self, mut tcp: TcpStream) -> Result<Relayed> {
        let relayed = self.relay(&mut tcp).await;
        if relayed.is_err() {
            tcp.set_zero_linger()?; // close() then sends RST
        }
        relayed
    }

    async fn relay(&self, tcp: &mut TcpStream) -> Result<Relayed> {
        let mut alcc = match self.alcc {
            Some(kind) => {
                // The controller decides when bytes leave; Nagle would hold back a tail shorter than a segment.
                tcp.set_nodelay(true)?;
                let socket = kernel::probe(tcp).context("cannot duplicate the client's socket")?;
                Some(AlccSocket::new(socket, kind).context("cannot put the client's socket under ALCC")?)
            }
            None => None,
        };
        let mut io = self.open_stream().await?.into_io();
        service::request_proxy(&mut io, self.target).await?;
        let (mut tcp_read, mut tcp_write) = tcp.split();
        let (mut io_read, mut io_write) = tokio::io::split(io);
        let upload = async {
            let copied = tokio::io::copy(&mut tcp_read, &mut io_write).await?;
            io_write.shutdown().await?;
            anyhow::Ok(copied)
        };
        let download = copy_governed(&mut io_read, &mut tcp_write, alcc.as_mut());
        let (uploaded, downloaded) = tokio::try_join!(upload, download)?;
        Ok(Relayed { uploaded, downloaded, alcc: alcc.map(|alcc| alcc.stats()) })
    }

    fn report(&self, peer: SocketAddr, relayed: &Relayed) {
        let (Some(kind), Some(alcc)) = (self.alcc, relayed.alcc) else { return };
        eprintln!(
            "tng proxy: {peer}: {} bytes down, {} up; alcc {kind}: window peaked at {} bytes, the kernel held at most \
             {} ({} TCP_INFO reads, {} timed round trips)",
            relayed.downloaded,
            relayed.uploaded,
            alcc.peak_window,
            alcc.peak_kernel_bytes,
            alcc.samples,
            alcc.round_trips
        );
    }
}
