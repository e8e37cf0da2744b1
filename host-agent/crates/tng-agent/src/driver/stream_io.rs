//! Socket-style code (`AsyncRead + AsyncWrite`) over a tng stream: each write goes to the driver as it is, with a
//! bounded number of bytes waiting for the driver's answer; what the stream delivers comes through a channel that
//! also carries its failure. A stream that failed (its connection lost, the peer's reset) is a read error, never
//! the clean end of file that a finished stream is: a relay must not pass a transfer cut short on as a complete one.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::io::StreamReader;

use super::handle::{Answer, Stream};

/// Bytes one write hands to the driver at most.
const WRITE_CHUNK: usize = 64 * 1024;
/// Bytes written but not yet taken by the connection. They queue ahead of the stream's unsent bound, so this stays
/// small: enough that the application fills the next chunk while the driver takes the last one.
const WRITES_IN_FLIGHT_BYTES: usize = 2 * WRITE_CHUNK;
/// Reads of the stream (each what one driver read returned, at most `READ_CHUNK`) waiting for the application.
const DELIVERED_QUEUE: usize = 16;

/// A tng stream as a socket: see the module's documentation.
pub struct StreamIo {
    delivered: StreamReader<ReceiverStream<io::Result<Bytes>>, Bytes>,
    stream: Stream,
    /// The driver's answers to the writes it has not finished taking, oldest first, with their sizes.
    writing: VecDeque<(Answer<()>, usize)>,
    writing_bytes: usize,
    /// The answer to the finish asked for by `poll_shutdown`.
    finishing: Option<Answer<()>>,
    /// The sending half was finished (or asked to be): dropping the socket does not ask again.
    finish_sent: bool,
}

impl StreamIo {
    pub(super) fn new(stream: Stream) -> StreamIo {
        let reader = stream.clone();
        let (deliver, delivered) = mpsc::channel(DELIVERED_QUEUE);
        tokio::spawn(async move {
            loop {
                let item = match reader.read().await {
                    Ok(Some(data)) => Ok(Bytes::from(data)),
                    Ok(None) => return, // dropping `deliver` is the clean end of file
                    Err(err) => Err(io::Error::new(io::ErrorKind::ConnectionAborted, format!("{err:#}"))),
                };
                let failed = item.is_err();
                if deliver.send(item).await.is_err() {
                    // The application dropped its end.
                    reader.abandon();
                    return;
                }
                if failed {
                    return;
                }
            }
        });
        StreamIo {
            delivered: StreamReader::new(ReceiverStream::new(delivered)),
            stream,
            writing: VecDeque::new(),
            writing_bytes: 0,
            finishing: None,
            finish_sent: false,
        }
    }

    /// Collects the driver's answers to earlier writes until at most `limit` bytes wait for one; the first failed
    /// write fails the socket.
    fn poll_writes_below(&mut self, cx: &mut Context<'_>, limit: usize) -> Poll<io::Result<()>> {
        while self.writing_bytes > limit {
            let Some((answer, size)) = self.writing.front_mut() else { break };
            let result = ready!(Pin::new(answer).poll(cx));
            self.writing_bytes -= *size;
            self.writing.pop_front();
            answered(result)?;
        }
        Poll::Ready(Ok(()))
    }
}

/// The driver's answer as the socket's result: a failed write or finish, or a driver that stopped, is a broken pipe.
fn answered(answer: Result<anyhow::Result<()>, oneshot::error::RecvError>) -> io::Result<()> {
    let result = answer.unwrap_or_else(|_| Err(anyhow::anyhow!("the tng driver has stopped")));
    result.map_err(|err| io::Error::new(io::ErrorKind::BrokenPipe, format!("{err:#}")))
}

impl Drop for StreamIo {
    /// A socket dropped without a shutdown still ends its stream cleanly after what it wrote, as closing a TCP
    /// socket does.
    fn drop(&mut self) {
        if !self.finish_sent {
            drop(self.stream.start_finish());
        }
    }
}

impl AsyncRead for StreamIo {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().delivered).poll_read(cx, buf)
    }
}

impl AsyncWrite for StreamIo {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.finish_sent {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::BrokenPipe, "the stream was shut down")));
        }
        ready!(this.poll_writes_below(cx, WRITES_IN_FLIGHT_BYTES - WRITE_CHUNK))?;
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let size = buf.len().min(WRITE_CHUNK);
        this.writing.push_back((this.stream.start_write(buf[..size].to_vec()), size));
        this.writing_bytes += size;
        Poll::Ready(Ok(size))
    }

    /// Done once the connection took every byte written (not once the peer has them, as for a TCP socket).
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_writes_below(cx, 0)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.finish_sent {
            this.finishing = Some(this.stream.start_finish());
            this.finish_sent = true;
        }
        ready!(this.poll_writes_below(cx, 0))?;
        if let Some(answer) = this.finishing.as_mut() {
            let result = ready!(Pin::new(answer).poll(cx));
            this.finishing = None;
            answered(result)?;
        }
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::Duration;

    use tng_proto::{Endpoint, EndpointConfig, ServerConfig, StaticKeypair};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::driver::Agent;
    use crate::resolver::LocalPolicies;

    /// A client stream to a server on loopback, and the server's agent.
    async fn stream_pair() -> (Stream, Agent) {
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let config = EndpointConfig { server: Some(ServerConfig::default()), ..EndpointConfig::server() };
        let server =
            Agent::start(Endpoint::new(config, StaticKeypair::from_seed(1), 1), &[any], LocalPolicies::default())
                .unwrap();
        let server_addr = server.local_addresses().borrow()[0];
        let client = Agent::start(
            Endpoint::new(EndpointConfig::client(), StaticKeypair::from_seed(2), 2),
            &[any],
            LocalPolicies::default(),
        )
        .unwrap();
        let local = client.local_addresses().borrow()[0];
        let conn = client.connect(vec![(local, server_addr)], None).await.unwrap();
        (client.open_stream(conn).await.unwrap(), server)
    }

    /// What the server reads from the stream until its end; a stream that never ends fails the test.
    async fn read_to_end(server: &Agent) -> Vec<u8> {
        let mut io = server.accept_stream().await.unwrap().into_io();
        let mut received = Vec::new();
        let reading = io.read_to_end(&mut received);
        tokio::time::timeout(Duration::from_secs(10), reading).await.expect("the stream ends").unwrap();
        received
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    #[tokio::test]
    async fn dropping_the_socket_ends_the_stream_after_every_byte_written() {
        let (stream, server) = stream_pair().await;
        let data = pattern(64 << 20);
        let mut io = stream.into_io();
        // The server reads nothing yet: write until flow control holds writes back in the driver (a write then
        // waits), so that the finish of the drop arrives while writes are parked there.
        let mut written = 0;
        while written < data.len() {
            match tokio::time::timeout(Duration::from_millis(200), io.write(&data[written..])).await {
                Ok(result) => written += result.unwrap(),
                Err(_) => break,
            }
        }
        assert!(written < data.len(), "flow control never held a write back");
        drop(io);
        let received = read_to_end(&server).await;
        assert_eq!(received.len(), written, "bytes received of those written");
        assert!(received == data[..written], "the bytes received differ from those written");
    }

    #[tokio::test]
    async fn shutdown_waits_for_the_writes_and_later_writes_fail() {
        let (stream, server) = stream_pair().await;
        let data = pattern(300_000);
        let mut io = stream.into_io();
        io.write_all(&data).await.unwrap();
        let reading = tokio::spawn(async move { read_to_end(&server).await });
        tokio::time::timeout(Duration::from_secs(10), io.shutdown()).await.expect("shutdown returns").unwrap();
        let err = io.write_all(b"late").await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
        let received = reading.await.unwrap();
        assert_eq!(received.len(), data.len(), "bytes received of those written");
        assert!(received == data, "the bytes received differ from those written");
    }
}
