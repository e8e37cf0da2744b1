//! The perf server: answers perf requests over tng streams and over kernel TCP and MPTCP on the same port.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use tng_proto::ConnectionHandle;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::protocol::{fill_pattern, Request, SenderStats, REQUEST_LEN, UNBOUNDED};
use super::{kernel, ByteStream};
use crate::driver::Agent;

const CHUNK: usize = 64 * 1024;

/// Sender-side statistics per client run token.
#[derive(Clone, Default)]
pub struct StatsByToken(Arc<Mutex<HashMap<u64, SenderStats>>>);

impl StatsByToken {
    fn get(&self, token: u64) -> SenderStats {
        self.0.lock().map(|s| s.get(&token).copied().unwrap_or_default()).unwrap_or_default()
    }

    fn record(&self, token: u64, update: impl FnOnce(&mut SenderStats)) {
        if let Ok(mut all) = self.0.lock() {
            update(all.entry(token).or_default());
        }
    }
}

/// Where a finished data stream's sender-side counters come from.
pub enum Counters {
    /// A kernel socket: TCP_INFO (or MPTCP subflow info) of this descriptor, added per connection.
    Kernel(OwnedFd),
    /// A tng stream: the connection's totals, which already cover every stream of the run.
    Tng { agent: Agent, conn: ConnectionHandle },
}

/// Serves kernel TCP and MPTCP clients on `listen`.
pub async fn serve_kernel(listen: SocketAddr, stats: StatsByToken) -> Result<()> {
    let listener = kernel::listen(listen)?;
    loop {
        let (stream, peer) = listener.accept().await?;
        stream.set_nodelay(true)?;
        let Some(probe) = kernel::probe(&stream) else { continue };
        let stats = stats.clone();
        tokio::spawn(async move {
            if let Err(err) = serve_stream(stream, &stats, Counters::Kernel(probe)).await {
                tracing::info!("perf connection from {peer}: {err:#}");
            }
        });
    }
}

/// Answers the requests of one stream until the client closes its side, then records the sender's counters.
pub async fn serve_stream(mut io: impl ByteStream, stats: &StatsByToken, counters: Counters) -> Result<()> {
    let mut run_token = None;
    let mut raw = [0u8; REQUEST_LEN];
    loop {
        match io.read_exact(&mut raw).await {
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(err) => return Err(err.into()),
        }
        match Request::decode(&raw)? {
            Request::Data { size, token } => {
                run_token = Some(token);
                if send_pattern(&mut io, size).await? == Sent::PeerClosed {
                    break;
                }
            }
            Request::Stats { token } => io.write_all(&stats.get(token).encode()).await?,
        }
    }
    if let Some(token) = run_token {
        record(stats, token, counters).await;
    }
    io.shutdown().await?;
    Ok(())
}

async fn record(stats: &StatsByToken, token: u64, counters: Counters) {
    match counters {
        Counters::Kernel(socket) => {
            let subflows = kernel::subflow_info(&socket);
            stats.record(token, |s| {
                s.retransmitted_packets += subflows.iter().map(|i| u64::from(i.total_retrans)).sum::<u64>();
                s.sent_packets += subflows.iter().map(|i| u64::from(i.segs_out)).sum::<u64>();
            });
        }
        Counters::Tng { agent, conn } => {
            let Ok(status) = agent.status().await else { return };
            let Some((_, connection)) = status.connections.iter().find(|(h, _)| *h == conn) else { return };
            stats.record(token, |s| {
                s.retransmitted_packets = connection.channels.iter().map(|c| c.retransmitted_packets).sum();
                s.sent_packets = connection.channels.iter().map(|c| c.sent_packets).sum();
            });
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Sent {
    All,
    PeerClosed,
}

/// Sends `size` pattern bytes, or for an unbounded request until the peer closes its side.
async fn send_pattern(io: &mut impl ByteStream, size: u64) -> Result<Sent> {
    let mut chunk = vec![0u8; CHUNK];
    let mut offset = 0u64;
    let (mut reader, mut writer) = tokio::io::split(io);
    let mut probe = [0u8; 1];
    while offset < size {
        let len = (size - offset).min(CHUNK as u64) as usize;
        fill_pattern(offset, &mut chunk[..len]);
        let mut pos = 0;
        while pos < len {
            tokio::select! {
                // `write` is cancel-safe: either it wrote `n` bytes or nothing.
                written = writer.write(&chunk[pos..len]) => pos += written?,
                read = reader.read(&mut probe), if size == UNBOUNDED => {
                    if matches!(read, Ok(0) | Err(_)) {
                        return Ok(Sent::PeerClosed);
                    }
                }
            }
        }
        offset += len as u64;
    }
    writer.flush().await?;
    Ok(Sent::All)
}
