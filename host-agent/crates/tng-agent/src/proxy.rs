//! `tng proxy`: forwards each local TCP connection over a stream of one tng connection to a TCP target behind the
//! server. What the proxy writes to its TCP client (the download) may run under an ALCC controller, as the perf
//! server's TCP sender does; what the client sends (the upload) is a plain copy.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use tng_proto::alcc::AlccStats;
use tng_proto::{CcKind, ConnectionHandle};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use crate::alcc::{copy_governed, AlccSocket};
use crate::driver::Agent;
use crate::perf::kernel;
use crate::service;

/// Where a proxy forwards its clients, and how it writes to them.
pub struct Proxy {
    pub agent: Agent,
    pub conn: ConnectionHandle,
    /// The TCP target, as the server reaches it.
    pub target: SocketAddr,
    /// The ALCC controller of every client's download, if any (one of `tng_proto::alcc::ALCC_KINDS`).
    pub alcc: Option<CcKind>,
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
    async fn forward(&self, tcp: TcpStream) -> Result<Relayed> {
        let mut alcc = match self.alcc {
            Some(kind) => {
                // The controller decides when bytes leave; Nagle would hold back a tail shorter than a segment.
                tcp.set_nodelay(true)?;
                let socket = kernel::probe(&tcp).context("cannot duplicate the client's socket")?;
                Some(AlccSocket::new(socket, kind).context("cannot put the client's socket under ALCC")?)
            }
            None => None,
        };
        let mut io = self.agent.open_stream(self.conn).await?.into_io();
        service::request_proxy(&mut io, self.target).await?;
        let (mut tcp_read, mut tcp_write) = tcp.into_split();
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
             {} ({} TCP_INFO reads)",
            relayed.downloaded, relayed.uploaded, alcc.peak_window, alcc.peak_kernel_bytes, alcc.samples
        );
    }
}
