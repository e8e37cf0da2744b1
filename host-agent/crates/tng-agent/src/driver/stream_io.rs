//! The in-process pipe that lets socket-style code (`AsyncRead + AsyncWrite`) run over a tng stream: what the code
//! writes goes through a small duplex pipe to a task that writes it to the stream; what the stream delivers comes
//! through a channel that also carries its failure. A stream that failed (its connection lost, the peer's reset)
//! is a read error, never the clean end of file that a finished stream is: a relay must not pass a transfer cut
//! short on as a complete one.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, DuplexStream, ReadBuf};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::io::StreamReader;

use super::handle::Stream;
use super::READ_CHUNK;

/// Buffer of the pipe toward the stream. Bytes waiting in it are queued ahead of the stream's unsent bound, so it is
/// kept small (one chunk); a larger pipe made no loopback throughput difference.
const PIPE_BYTES: usize = 64 * 1024;
/// Reads of the stream (each what one driver read returned, at most `READ_CHUNK`) waiting for the application.
const DELIVERED_QUEUE: usize = 16;

/// A tng stream as a socket: see the module's documentation.
pub struct StreamIo {
    delivered: StreamReader<ReceiverStream<io::Result<Bytes>>, Bytes>,
    to_stream: DuplexStream,
}

impl StreamIo {
    pub(super) fn new(stream: Stream) -> StreamIo {
        let (to_stream, pump) = tokio::io::duplex(PIPE_BYTES);
        let (mut from_app, _) = tokio::io::split(pump);
        let sender = stream.clone();
        tokio::spawn(async move {
            loop {
                // A fresh buffer per read moves to the driver as it is: no zero-filling, no copy.
                let mut buffer = Vec::with_capacity(READ_CHUNK);
                match from_app.read_buf(&mut buffer).await {
                    Ok(0) => {
                        let _ = sender.finish().await;
                        return;
                    }
                    Err(_) => {
                        sender.abandon();
                        return;
                    }
                    Ok(_) => {
                        if sender.write_all(buffer).await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
        let (deliver, delivered) = mpsc::channel(DELIVERED_QUEUE);
        tokio::spawn(async move {
            loop {
                let item = match stream.read().await {
                    Ok(Some(data)) => Ok(Bytes::from(data)),
                    Ok(None) => return, // dropping `deliver` is the clean end of file
                    Err(err) => Err(io::Error::new(io::ErrorKind::ConnectionAborted, format!("{err:#}"))),
                };
                let failed = item.is_err();
                if deliver.send(item).await.is_err() {
                    // The application dropped its end.
                    stream.abandon();
                    return;
                }
                if failed {
                    return;
                }
            }
        });
        StreamIo { delivered: StreamReader::new(ReceiverStream::new(delivered)), to_stream }
    }
}

impl AsyncRead for StreamIo {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().delivered).poll_read(cx, buf)
    }
}

impl AsyncWrite for StreamIo {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().to_stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().to_stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().to_stream).poll_shutdown(cx)
    }
}
