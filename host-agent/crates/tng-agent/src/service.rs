//! What a tng stream carries: every stream starts with one byte naming its service.

use std::net::SocketAddr;

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::driver::{Agent, Stream};
use crate::perf::server::{serve_stream, Counters, StatsByToken};
use crate::perf::ByteStream;

/// The stream carries perf requests (`crate::perf::protocol`).
pub const PERF: u8 = b'P';
/// The stream carries one proxied TCP connection: a length-prefixed target address follows.
pub const PROXY: u8 = b'X';

/// Which proxy targets a server accepts; an open proxy would let any peer reach any host behind the server.
#[derive(Clone, Debug, Default)]
pub struct ProxyPolicy {
    pub allowed: Vec<SocketAddr>,
}

/// Writes the preamble of a proxy stream.
pub async fn request_proxy(io: &mut impl ByteStream, target: SocketAddr) -> Result<()> {
    let target = target.to_string();
    let mut preamble = vec![PROXY];
    preamble.extend_from_slice(&u16::try_from(target.len())?.to_be_bytes());
    preamble.extend_from_slice(target.as_bytes());
    io.write_all(&preamble).await?;
    Ok(())
}

/// Serves every stream peers open: perf requests, and proxy connections to allowed targets.
pub async fn serve_streams(agent: Agent, stats: StatsByToken, proxy: ProxyPolicy) -> Result<()> {
    loop {
        let stream = agent.accept_stream().await?;
        let (agent, stats, proxy) = (agent.clone(), stats.clone(), proxy.clone());
        tokio::spawn(async move {
            let (conn, id) = (stream.conn, stream.id);
            if let Err(err) = serve_one(agent, stream, &stats, &proxy).await {
                tracing::info!("{conn} stream {id}: {err:#}");
            }
        });
    }
}

async fn serve_one(agent: Agent, stream: Stream, stats: &StatsByToken, proxy: &ProxyPolicy) -> Result<()> {
    let conn = stream.conn;
    let mut io = stream.into_io();
    let mut service = [0u8; 1];
    io.read_exact(&mut service).await.context("stream ended before naming its service")?;
    match service[0] {
        PERF => serve_stream(io, stats, Counters::Tng { agent, conn }).await,
        PROXY => {
            let mut len = [0u8; 2];
            io.read_exact(&mut len).await?;
            let mut target = vec![0u8; usize::from(u16::from_be_bytes(len))];
            io.read_exact(&mut target).await?;
            let target: SocketAddr = std::str::from_utf8(&target)?.parse().context("bad proxy target")?;
            if !proxy.allowed.contains(&target) {
                bail!("proxy target {target} is not allowed (start the server with --allow-proxy {target})");
            }
            let mut tcp = TcpStream::connect(target).await.with_context(|| format!("cannot reach {target}"))?;
            if let Err(err) = tokio::io::copy_bidirectional(&mut io, &mut tcp).await {
                // An upload cut short must not reach the target as a complete one: reset, do not close.
                tcp.set_zero_linger()?;
                return Err(err.into());
            }
            Ok(())
        }
        other => bail!("unknown service byte {other:#04x}"),
    }
}
