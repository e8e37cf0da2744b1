//! The application's side of the driver: an [`Agent`] handle per daemon and a [`Stream`] per tng stream (as a socket
//! through `stream_io`).

use std::net::SocketAddr;

use anyhow::{anyhow, Result};
use tng_proto::{ConnectionHandle, ConnectionStats, Endpoint, Identity, StreamId};
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use super::command::{Command, Reply, Status};
use super::event_loop::Driver;
use super::stream_io::StreamIo;
use crate::netlink;
use crate::policy::Policy;
use crate::resolver::LocalPolicies;

/// Where the driver's answer to a request arrives.
pub(super) type Answer<T> = oneshot::Receiver<Result<T>>;

/// Connection announcements a slow listener may lag behind (it then misses the oldest).
const CONNECTED_BACKLOG: usize = 256;

/// A handle to the driver task; cheap to clone.
#[derive(Clone)]
pub struct Agent {
    commands: mpsc::UnboundedSender<Command>,
    locals: watch::Receiver<Vec<SocketAddr>>,
    connected: broadcast::Sender<(ConnectionHandle, Identity)>,
}

impl Agent {
    /// Starts the driver with sockets bound to `locals` (port 0 picks a free port). A server endpoint's sockets bound
    /// to the unspecified address answer from the address each datagram was sent to. `policies` govern its
    /// connections until the controller's arrive.
    pub fn start(endpoint: Endpoint, locals: &[SocketAddr], policies: LocalPolicies) -> Result<Agent> {
        let (commands, inbox) = mpsc::unbounded_channel();
        let (bound, bound_rx) = watch::channel(Vec::new());
        let (connected, _) = broadcast::channel(CONNECTED_BACKLOG);
        let mut driver = Driver::new(endpoint, inbox, policies, bound, connected.clone());
        for &local in locals {
            driver.bind(local)?;
        }
        // A weak sender: the watcher must not keep the driver alive once every handle is gone.
        let driver_inbox = commands.downgrade();
        let watching = netlink::watch(move |event| {
            driver_inbox.upgrade().is_some_and(|inbox| inbox.send(Command::Address(event)).is_ok())
        });
        if let Err(err) = watching {
            tracing::warn!("local address changes will not be followed: {err:#}");
        }
        tokio::spawn(driver.run());
        Ok(Agent { commands, locals: bound_rx, connected })
    }

    async fn ask<T>(&self, make: impl FnOnce(Reply<T>) -> Command) -> Result<T> {
        self.request(make).await.map_err(|_| anyhow!("the tng driver has stopped"))?
    }

    /// Sends a request; its answer arrives on the returned channel, which closes unanswered if the driver stopped.
    fn request<T>(&self, make: impl FnOnce(Reply<T>) -> Command) -> Answer<T> {
        let (reply, answer) = oneshot::channel();
        // A send to a stopped driver drops `reply`, which closes `answer`.
        let _ = self.commands.send(make(reply));
        answer
    }

    /// Connects over `paths` (handshake on the first) and waits for the handshake to finish.
    pub async fn connect(
        &self,
        paths: Vec<(SocketAddr, SocketAddr)>,
        pin: Option<Identity>,
    ) -> Result<ConnectionHandle> {
        self.ask(|reply| Command::Connect { paths, pin, reply }).await
    }

    pub async fn open_stream(&self, conn: ConnectionHandle) -> Result<Stream> {
        let id = self.ask(|reply| Command::Open { conn, reply }).await?;
        Ok(Stream { agent: self.clone(), conn, id })
    }

    /// The next stream a peer opened, on any connection.
    pub async fn accept_stream(&self) -> Result<Stream> {
        let (conn, id) = self.ask(|reply| Command::Accept { reply }).await?;
        Ok(Stream { agent: self.clone(), conn, id })
    }

    pub fn close(&self, conn: ConnectionHandle, reason: &str) {
        let _ = self.commands.send(Command::Close { conn, reason: reason.to_owned() });
    }

    /// Replaces the controller's policies; every connection is matched again.
    pub fn set_controller_policies(&self, policies: Vec<Policy>) {
        let _ = self.commands.send(Command::ControllerPolicies(policies));
    }

    pub async fn status(&self) -> Result<Status> {
        self.ask(|reply| Command::Status { reply }).await
    }

    /// The counters of `conn`, or `None` once it is gone.
    pub async fn connection_stats(&self, conn: ConnectionHandle) -> Result<Option<ConnectionStats>> {
        self.ask(|reply| Command::ConnectionStats { conn, reply }).await
    }

    /// The bound local addresses, marked changed on every bind, migration and kernel address event (an address
    /// behind a socket bound to the unspecified address may have come or gone).
    pub fn local_addresses(&self) -> watch::Receiver<Vec<SocketAddr>> {
        self.locals.clone()
    }

    /// Each connection that completes its handshake, with the peer's identity.
    pub fn connected_peers(&self) -> broadcast::Receiver<(ConnectionHandle, Identity)> {
        self.connected.subscribe()
    }

    /// The peer of `conn` is now at `addresses` (learned from the host registry); false once `conn` is gone.
    pub async fn peer_moved(&self, conn: ConnectionHandle, addresses: Vec<SocketAddr>) -> Result<bool> {
        self.ask(|reply| Command::PeerAddresses { conn, addresses, reply }).await
    }

    /// Binds another local address (multihoming) and returns the bound address.
    pub async fn bind(&self, local: SocketAddr) -> Result<SocketAddr> {
        self.ask(|reply| Command::BindLocal { local, reply }).await
    }

    /// Sends everything addressed to `peer` through the relay at `relay`, from the next datagram on: each packet
    /// travels in a SECTION of its own (wire-format section 10).
    pub fn route_through(&self, peer: SocketAddr, relay: SocketAddr) {
        let _ = self.commands.send(Command::RouteThrough { peer, relay });
    }
}

/// One reliable ordered byte stream of a tng connection.
#[derive(Clone)]
pub struct Stream {
    agent: Agent,
    pub conn: ConnectionHandle,
    pub id: StreamId,
}

impl Stream {
    /// Hands `data` to the driver without waiting: the answer comes once the connection took all of it (its send
    /// buffer applies backpressure). The driver takes a stream's writes in the order they were sent.
    pub(super) fn start_write(&self, data: Vec<u8>) -> Answer<()> {
        let (conn, id) = (self.conn, self.id);
        self.agent.request(|reply| Command::Write { conn, id, data, reply })
    }

    /// Asks the driver to end the sending half after the bytes written before, without waiting.
    pub(super) fn start_finish(&self) -> Answer<()> {
        let (conn, id) = (self.conn, self.id);
        self.agent.request(|reply| Command::Finish { conn, id, reply })
    }

    /// The next bytes in order, or `None` once the peer finished the stream.
    pub async fn read(&self) -> Result<Option<Vec<u8>>> {
        let (conn, id) = (self.conn, self.id);
        self.agent.ask(|reply| Command::Read { conn, id, reply }).await
    }

    /// Resets our sending half and asks the peer to stop sending, so that it learns the stream is dead instead of
    /// waiting for flow-control credit forever.
    pub fn abandon(&self) {
        let _ = self.agent.commands.send(Command::Abandon { conn: self.conn, id: self.id });
    }

    /// This stream as a socket, so code written for sockets (`AsyncRead + AsyncWrite`) runs over tng unchanged:
    /// shutting down its write half finishes the stream; a failed stream is a read error, not an end of file.
    pub fn into_io(self) -> StreamIo {
        StreamIo::new(self)
    }
}
