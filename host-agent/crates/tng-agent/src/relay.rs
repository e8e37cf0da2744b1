//! `tng relay`: the thin UDP driver around the sans-IO relay core (`tng_relay::Relay`). One socket; datagrams in,
//! datagrams out, the core's timer. Everything the relay knows lives in the core and is soft state: killing the
//! process loses at most the packets it held (docs/architecture.md, "Relays").

use std::future::pending;
use std::net::SocketAddr;
use std::time::Instant;

use anyhow::{Context, Result};
use tng_proto::Time;
use tng_relay::{Relay, RelayConfig};
use tokio::net::UdpSocket;

/// Largest datagram read: anything longer than a tng packet is read whole and dropped by the codec.
const RECEIVE_BUFFER: usize = 65_536;

/// Relays SECTIONs arriving on `listen` until interrupted.
pub async fn run(listen: SocketAddr, config: RelayConfig) -> Result<()> {
    let socket = UdpSocket::bind(listen).await.with_context(|| format!("binding the relay socket {listen}"))?;
    tracing::info!(address = %socket.local_addr()?, "relay listening");
    let start = Instant::now();
    let now = || Time::from_nanos(u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX));
    let mut relay = Relay::new(config);
    let mut buffer = vec![0; RECEIVE_BUFFER];
    loop {
        while let Some((to, datagram)) = relay.poll_transmit(now()) {
            if let Err(err) = socket.send_to(&datagram, to).await {
                // One unreachable next hop must not stop the others: the packet is lost like any section loss.
                tracing::debug!(%to, %err, "relay send failed");
            }
        }
        let timer = relay.poll_timeout().map(|deadline| deadline.saturating_since(now()));
        tokio::select! {
            received = socket.recv_from(&mut buffer) => {
                let (len, from) = received.context("receiving on the relay socket")?;
                relay.handle_datagram(now(), from, &buffer[..len]);
            }
            () = async {
                match timer {
                    Some(wait) => tokio::time::sleep(wait).await,
                    None => pending().await,
                }
            } => relay.handle_timeout(now()),
            interrupted = tokio::signal::ctrl_c() => {
                interrupted.context("waiting for Ctrl-C")?;
                tracing::info!(stats = ?relay.stats(), "relay stopping");
                return Ok(());
            }
        }
    }
}
