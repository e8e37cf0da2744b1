//! The perf server: answers perf requests over tng streams and over kernel TCP and MPTCP on the same port.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use tng_proto::ConnectionHandle;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::protocol::{fill_pattern, Request, SenderStats, DATA_FOLLOWS, REFUSED, REQUEST_LEN, UNBOUNDED};
use super::{kernel, ByteStream};
use crate::driver::Agent;

const CHUNK: usize = 64 * 1024;

/// Sender-side statistics per client run token.
#[derive(Clone, Default)]
pub struct StatsByToken(Arc<Mutex<HashMap<u64, SenderStats>>>);

impl StatsByToken {
    fn get(&self, token: u64) -> SenderStats {
        self.0.lock().map(|s| s.get(&token).cloned().unwrap_or_default()).unwrap_or_default()
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
    let mut applied_cc: Option<String> = None;
    let mut raw = [0u8; REQUEST_LEN];
    loop {
        match io.read_exact(&mut raw).await {
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(err) => return Err(err.into()),
        }
        match Request::decode(&raw)? {
            Request::Data { size, token, cc } => {
                run_token = Some(token);
                if let Some(cc) = cc.filter(|cc| applied_cc.as_ref() != Some(cc)) {
                    if let Err(err) = apply_congestion(&counters, &cc) {
                        refuse(&mut io, &format!("{err:#}")).await?;
                        return Err(err);
                    }
                    applied_cc = Some(cc);
                }
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

/// The data sender is the server, so the congestion control a client asks for applies to the server's socket.
fn apply_congestion(counters: &Counters, cc: &str) -> Result<()> {
    match counters {
        Counters::Kernel(socket) => kernel::set_congestion(socket, cc),
        Counters::Tng { .. } => {
            anyhow::bail!("a tng stream has no kernel congestion control (the tng server's --cc or policy picks it)")
        }
    }
}

/// Answers a data request with the reason it cannot be served, and ends the stream.
async fn refuse(io: &mut impl ByteStream, reason: &str) -> Result<()> {
    let reason = &reason.as_bytes()[..reason.len().min(usize::from(u16::MAX))];
    let mut answer = vec![REFUSED];
    answer.extend_from_slice(&u16::try_from(reason.len())?.to_be_bytes());
    answer.extend_from_slice(reason);
    io.write_all(&answer).await?;
    io.shutdown().await?;
    Ok(())
}

async fn record(stats: &StatsByToken, token: u64, counters: Counters) {
    match counters {
        Counters::Kernel(socket) => {
            let subflows = kernel::subflow_info(&socket);
            let cc = kernel::congestion(&socket);
            stats.record(token, |s| {
                s.cc = cc;
                s.retransmitted_packets += subflows.iter().map(|i| u64::from(i.total_retrans)).sum::<u64>();
                s.sent_packets += subflows.iter().map(|i| u64::from(i.segs_out)).sum::<u64>();
            });
        }
        Counters::Tng { agent, conn } => {
            let Ok(status) = agent.status().await else { return };
            let Some((_, connection)) = status.connections.iter().find(|(h, _)| *h == conn) else { return };
            stats.record(token, |s| {
                s.cc = connection.channels.first().map(|c| c.cc.to_owned());
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

/// Sends the [`DATA_FOLLOWS`] status and `size` pattern bytes, or for an unbounded request pattern bytes until the
/// peer closes its side.
async fn send_pattern(io: &mut impl ByteStream, size: u64) -> Result<Sent> {
    // The status byte rides in the first write with the data, so it costs no packet of its own.
    let mut chunk = vec![0u8; 1 + CHUNK];
    chunk[0] = DATA_FOLLOWS;
    let mut status = 1;
    let mut offset = 0u64;
    let (mut reader, mut writer) = tokio::io::split(io);
    let mut probe = [0u8; 1];
    while status > 0 || offset < size {
        let len = (size - offset).min(CHUNK as u64) as usize;
        let end = status + len;
        fill_pattern(offset, &mut chunk[status..end]);
        let mut pos = 0;
        while pos < end {
            tokio::select! {
                // `write` is cancel-safe: either it wrote `n` bytes or nothing.
                written = writer.write(&chunk[pos..end]) => pos += written?,
                read = reader.read(&mut probe), if size == UNBOUNDED => {
                    if matches!(read, Ok(0) | Err(_)) {
                        return Ok(Sent::PeerClosed);
                    }
                }
            }
        }
        offset += len as u64;
        status = 0;
    }
    writer.flush().await?;
    Ok(Sent::All)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::protocol::count_corrupted;
    use tokio::net::TcpStream;

    /// A kernel perf server on a free loopback port.
    async fn kernel_server() -> SocketAddr {
        let addr = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port");
        tokio::spawn(serve_kernel(addr, StatsByToken::default()));
        for _ in 0..100 {
            if TcpStream::connect(addr).await.is_ok() {
                return addr;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("perf server did not listen on {addr}");
    }

    async fn ask(addr: SocketAddr, request: Request) -> Vec<u8> {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream.write_all(&request.encode().expect("encodes")).await.expect("send request");
        stream.shutdown().await.expect("close our side");
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.expect("read answer");
        answer
    }

    #[tokio::test]
    async fn server_socket_sends_with_the_requested_congestion_control() {
        let addr = kernel_server().await;
        let answer = ask(addr, Request::Data { size: 5000, token: 42, cc: Some("reno".into()) }).await;
        assert_eq!(answer.len(), 1 + 5000);
        assert_eq!(answer[0], DATA_FOLLOWS);
        assert_eq!(count_corrupted(0, &answer[1..]), 0);
        let stats = ask(addr, Request::Stats { token: 42 }).await;
        let stats = SenderStats::decode(stats.as_slice().try_into().expect("stats length"));
        assert_eq!(stats.cc.as_deref(), Some("reno"));
    }

    #[tokio::test]
    async fn unknown_congestion_control_is_refused_with_the_reason() {
        let addr = kernel_server().await;
        let answer = ask(addr, Request::Data { size: 5000, token: 7, cc: Some("no-such-cc".into()) }).await;
        assert_eq!(answer[0], REFUSED);
        let len = usize::from(u16::from_be_bytes([answer[1], answer[2]]));
        let reason = std::str::from_utf8(&answer[3..]).expect("UTF-8 reason");
        assert_eq!(reason.len(), len);
        assert_eq!(reason, "congestion control \"no-such-cc\" is not available in this kernel");
    }
}
