//! `tng perf server`: answers perf requests over kernel TCP and MPTCP.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::kernel;
use super::protocol::{fill_pattern, Request, SenderStats, REQUEST_LEN, UNBOUNDED};

const CHUNK: usize = 64 * 1024;

/// Sender-side statistics per client run token.
type StatsByToken = Arc<Mutex<HashMap<u64, SenderStats>>>;

pub async fn serve(listen: SocketAddr) -> Result<()> {
    let listener = kernel::listen(listen)?;
    eprintln!("tng perf server listening on {listen} (tcp and mptcp)");
    let stats = StatsByToken::default();
    loop {
        let (stream, peer) = listener.accept().await?;
        let stats = stats.clone();
        tokio::spawn(async move {
            if let Err(err) = serve_connection(stream, &stats).await {
                eprintln!("perf connection from {peer}: {err:#}");
            }
        });
    }
}

async fn serve_connection(mut stream: TcpStream, stats: &StatsByToken) -> Result<()> {
    stream.set_nodelay(true)?;
    let mut run_token = None;
    let mut raw = [0u8; REQUEST_LEN];
    loop {
        match stream.read_exact(&mut raw).await {
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(err) => return Err(err.into()),
        }
        match Request::decode(&raw)? {
            Request::Data { size, token } => {
                run_token = Some(token);
                if send_pattern(&mut stream, size).await? == Sent::PeerClosed {
                    break;
                }
            }
            Request::Stats { token } => {
                let answer = stats.lock().map(|s| s.get(&token).copied().unwrap_or_default()).unwrap_or_default();
                stream.write_all(&answer.encode()).await?;
            }
        }
    }
    // Counters are read after the last byte went out, when the peer has closed its side.
    if let Some(token) = run_token {
        let subflows = kernel::subflow_info(&stream);
        let add = SenderStats {
            retransmitted_packets: subflows.iter().map(|s| u64::from(s.total_retrans)).sum(),
            sent_packets: subflows.iter().map(|s| u64::from(s.segs_out)).sum(),
        };
        if let Ok(mut all) = stats.lock() {
            let entry = all.entry(token).or_default();
            entry.retransmitted_packets += add.retransmitted_packets;
            entry.sent_packets += add.sent_packets;
        }
    }
    Ok(())
}

#[derive(Debug, PartialEq, Eq)]
enum Sent {
    All,
    PeerClosed,
}

/// Sends `size` pattern bytes, or for an unbounded request until the peer closes its side.
async fn send_pattern(stream: &mut TcpStream, size: u64) -> Result<Sent> {
    let mut chunk = vec![0u8; CHUNK];
    let mut offset = 0u64;
    let (mut reader, mut writer) = stream.split();
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
    Ok(Sent::All)
}
