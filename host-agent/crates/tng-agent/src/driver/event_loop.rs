//! The driver task: owns the `Endpoint`, binds sockets, sends and receives datagrams, runs its timers, and answers
//! the application's commands, parking writes and reads until the endpoint can take or give bytes.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use tng_proto::{ConnectionHandle, Endpoint, Event, Identity, ReadOutcome, StreamError, StreamId, Time};
use tng_relay::EndpointSections;
use tokio::sync::{broadcast, mpsc, watch};

use super::closed::ClosedReasons;
use super::command::{Command, Reply, Status};
use super::send_batches::{Batch, SendBatches};
use super::READ_CHUNK;
use crate::netlink::{AddressEvent, Renumbering};
use crate::resolver::{LocalPolicies, PolicyResolver};
use crate::udp::{self, Socket};

/// Error code of a stream reset because its application end went away.
const ABANDONED: u64 = 1;
/// Receives (each up to 64 KiB with GRO) handled per socket before the driver sends what they caused (ACKs) and
/// looks at its other work again.
const RECEIVES_PER_WAKEUP: usize = 16;
/// Packets a section to a relay holds while its window is full; more are dropped and recovered end to end.
const SECTION_QUEUE_LIMIT: usize = 256;

struct PendingWrite {
    data: Vec<u8>,
    written: usize,
    reply: Reply<()>,
    /// A finish asked for while the write waited: it ends the stream once the write's last byte is in.
    finish: Option<Reply<()>>,
}

impl PendingWrite {
    /// Answers the write, and the finish waiting behind it, with the error that ended it.
    fn fail(self, error: impl Fn() -> anyhow::Error) {
        let _ = self.reply.send(Err(error()));
        if let Some(finish) = self.finish {
            let _ = finish.send(Err(error()));
        }
    }
}

pub(super) struct Driver {
    endpoint: Endpoint,
    /// The sections to and from relays, between the endpoint and the sockets.
    sections: EndpointSections,
    epoch: Instant,
    /// The driver receives on these itself: a separate receive task cost a task switch and a copy per datagram
    /// burst.
    sockets: HashMap<SocketAddr, Arc<Socket>>,
    /// Where received datagrams land while the endpoint handles them.
    recv_buffer: Vec<u8>,
    /// Where the datagrams of each GSO send are put together; their buffers are reused.
    send_batches: SendBatches,
    renumbering: Renumbering,
    inbox: mpsc::UnboundedReceiver<Command>,
    connecting: HashMap<ConnectionHandle, Reply<ConnectionHandle>>,
    opening: HashMap<ConnectionHandle, Vec<Reply<StreamId>>>,
    accepting: VecDeque<Reply<(ConnectionHandle, StreamId)>>,
    incoming: VecDeque<(ConnectionHandle, StreamId)>,
    /// Writes waiting for room in their stream's send buffer, oldest first.
    writes: HashMap<(ConnectionHandle, StreamId), VecDeque<PendingWrite>>,
    reads: HashMap<(ConnectionHandle, StreamId), Reply<Option<Vec<u8>>>>,
    closed: ClosedReasons,
    policies: PolicyResolver,
    /// Where stream reads land before they are handed to the application.
    read_buffer: Vec<u8>,
    /// The bound local addresses, for the host registry.
    locals: watch::Sender<Vec<SocketAddr>>,
    connected: broadcast::Sender<(ConnectionHandle, Identity)>,
}

impl Driver {
    pub(super) fn new(
        endpoint: Endpoint,
        inbox: mpsc::UnboundedReceiver<Command>,
        policies: LocalPolicies,
        locals: watch::Sender<Vec<SocketAddr>>,
        connected: broadcast::Sender<(ConnectionHandle, Identity)>,
    ) -> Driver {
        let transport = &endpoint.config().transport;
        let sections = EndpointSections::new(transport.cc, transport.cc_config.clone(), SECTION_QUEUE_LIMIT);
        let policies = PolicyResolver::new(policies, transport.clone());
        Driver {
            endpoint,
            sections,
            epoch: Instant::now(),
            sockets: HashMap::new(),
            recv_buffer: udp::recv_buffer(),
            send_batches: SendBatches::default(),
            renumbering: Renumbering::default(),
            inbox,
            connecting: HashMap::new(),
            opening: HashMap::new(),
            accepting: VecDeque::new(),
            incoming: VecDeque::new(),
            writes: HashMap::new(),
            reads: HashMap::new(),
            closed: ClosedReasons::default(),
            policies,
            read_buffer: vec![0u8; READ_CHUNK],
            locals,
            connected,
        }
    }

    fn now(&self) -> Time {
        since(self.epoch)
    }

    fn instant(&self, time: Time) -> Instant {
        self.epoch + Duration::from_nanos(time.as_nanos())
    }

    /// Binds a socket for a new local address and tells the endpoint (a client opens channels from it).
    pub(super) fn bind(&mut self, local: SocketAddr) -> Result<SocketAddr> {
        let bound = self.open_socket(local)?;
        let now = self.now();
        self.endpoint.add_local_address(now, bound);
        tracing::info!("listening on UDP {bound}");
        Ok(bound)
    }

    /// Binds a socket; the run loop receives on it from now on.
    fn open_socket(&mut self, local: SocketAddr) -> Result<SocketAddr> {
        let socket = Socket::bind(local, self.endpoint.config().server.is_some())?;
        let bound = socket.local;
        self.sockets.insert(bound, socket);
        self.publish_locals();
        Ok(bound)
    }

    /// Follows a kernel address event: a bound address replaced on its interface moves our channels.
    fn on_address_event(&mut self, event: AddressEvent) {
        let sockets = &self.sockets;
        let is_bound = |ip: IpAddr| sockets.keys().any(|local| local.ip() == ip);
        if let Some((old, new)) = self.renumbering.on_event(Instant::now(), event, is_bound) {
            self.migrate(old, new);
        }
        self.publish_locals();
    }

    fn publish_locals(&self) {
        let mut locals: Vec<SocketAddr> = self.sockets.keys().copied().collect();
        locals.sort();
        self.locals.send_replace(locals);
    }

    /// Rebinds every socket on `old` to `new` (the same port if free) and migrates the channels bound to it: the
    /// core validates the new path and moves each channel there.
    fn migrate(&mut self, old: IpAddr, new: IpAddr) {
        let moving: Vec<SocketAddr> = self.sockets.keys().filter(|local| local.ip() == old).copied().collect();
        for from in moving {
            let to = match self
                .open_socket(SocketAddr::new(new, from.port()))
                .or_else(|_| self.open_socket(SocketAddr::new(new, 0)))
            {
                Ok(to) => to,
                Err(err) => {
                    tracing::warn!("local address {old} was replaced by {new}, but {err:#}");
                    continue;
                }
            };
            tracing::info!("local address {from} replaced by {to}: migrating its channels");
            let now = self.now();
            self.endpoint.local_address_changed(now, from, to);
            self.sockets.remove(&from);
            self.publish_locals();
        }
    }

    pub(super) async fn run(mut self) {
        loop {
            self.process_events();
            self.flush().await;
            // Sending can wake writers that the unsent bound held back, and what they write is more to send.
            while self.process_events() {
                self.flush().await;
            }
            let deadline = [self.endpoint.poll_timeout(), self.sections.poll_timeout()].into_iter().flatten().min();
            let deadline = deadline.map(|t| self.instant(t));
            tokio::select! {
                command = self.inbox.recv() => match command {
                    Some(command) => self.handle(command),
                    None => return,
                },
                () = any_readable(&self.sockets) => self.receive(),
                () = sleep_until(deadline) => {
                    let now = self.now();
                    self.endpoint.handle_timeout(now);
                    self.sections.handle_timeout(now);
                }
            }
        }
    }

    /// Hands the endpoint what waits on every socket, a bounded number of receives each.
    fn receive(&mut self) {
        let Driver { sockets, endpoint, sections, recv_buffer, epoch, .. } = self;
        for socket in sockets.values() {
            for _ in 0..RECEIVES_PER_WAKEUP {
                match socket.try_recv(recv_buffer) {
                    Ok(Some(received)) => {
                        // Stamped as read, not as the wakeup began: a datagram that arrived while the loop handled
                        // earlier ones (or while the process waited for a core) would otherwise be stamped before
                        // it arrived, and the ACK delay reported for it would exceed the real one, handing the peer
                        // an RTT sample below the path's (a delay-based controller's base RTT, for good).
                        let now = since(*epoch);
                        for payload in received.payloads() {
                            let path = (received.local, received.remote);
                            sections.deliver(endpoint, now, path, received.ecn, payload);
                        }
                    }
                    Ok(None) => break,
                    Err(err) => {
                        // A UDP socket reports a pending error once; the next receive goes on.
                        tracing::warn!("receiving on {}: {err}", socket.local);
                        break;
                    }
                }
            }
        }
    }

    /// Sends everything the endpoint has queued, datagrams to one destination together (GSO).
    async fn flush(&mut self) {
        let now = self.now();
        let mut batches = std::mem::take(&mut self.send_batches);
        while let Some(transmit) = self.sections.poll_transmit(&mut self.endpoint, now, batches.landing()) {
            let Some(socket) = self.socket_for(transmit.local) else {
                tracing::debug!("no socket for local address {}; dropping a datagram", transmit.local);
                batches.discard_last(transmit.size);
                continue;
            };
            if let Some(batch) = batches.file(&transmit, socket.max_segments()) {
                let socket = self.socket_for(batch.to.local);
                batches.recycle(send(socket, batch).await);
            }
        }
        while let Some(batch) = batches.pop_oldest() {
            let socket = self.socket_for(batch.to.local);
            batches.recycle(send(socket, batch).await);
        }
        self.send_batches = batches;
    }

    /// A connection about to open to a server without a relay route takes the relay its policy names, if any; the
    /// route stays for every later connection to that server (a relay named by `--relay` is never replaced).
    fn route_by_policy(&mut self, paths: &[(SocketAddr, SocketAddr)]) {
        let Some((route, policy)) = self.policies.relay_for(paths) else { return };
        for &(_, server) in paths {
            if self.sections.route(server).is_none() {
                tracing::info!("{server}: through relay {route} (policy {:?}, {})", policy.name, policy.source);
                self.sections.route_through(server, route.relay_for(server));
            }
        }
    }

    fn socket_for(&self, local: SocketAddr) -> Option<Arc<Socket>> {
        let bound = self.sockets.get(&local).or_else(|| {
            // A socket bound to the unspecified address serves every address of its port.
            self.sockets.values().find(|s| s.local.ip().is_unspecified() && s.local.port() == local.port())
        });
        bound.cloned()
    }

    fn handle(&mut self, command: Command) {
        let now = self.now();
        match command {
            Command::Connect { paths, pin, reply } => {
                self.route_by_policy(&paths);
                match self.endpoint.connect(now, &paths, pin) {
                    Ok(conn) => {
                        self.connecting.insert(conn, reply);
                    }
                    Err(err) => {
                        let _ = reply.send(Err(err.into()));
                    }
                }
            }
            Command::Open { conn, reply } => self.open(conn, reply),
            Command::Accept { reply } => match self.incoming.pop_front() {
                Some(stream) => {
                    let _ = reply.send(Ok(stream));
                }
                None => self.accepting.push_back(reply),
            },
            Command::Write { conn, id, data, reply } => {
                self.writes.entry((conn, id)).or_default().push_back(PendingWrite {
                    data,
                    written: 0,
                    reply,
                    finish: None,
                });
                self.progress_write(conn, id);
            }
            Command::Finish { conn, id, reply } => {
                match self.writes.get_mut(&(conn, id)).and_then(|queue| queue.back_mut()) {
                    // Commands arrive in order: the stream ends after the bytes written before the finish.
                    Some(last) => last.finish = Some(reply),
                    None => self.finish(conn, id, reply),
                }
            }
            Command::Abandon { conn, id } => {
                if let Some(c) = self.endpoint.connection(conn) {
                    // Either half may already be closed; what is left is torn down.
                    let _ = c.reset(id, ABANDONED);
                    let _ = c.stop_sending(id, ABANDONED);
                }
                for pending in self.writes.remove(&(conn, id)).unwrap_or_default() {
                    pending.fail(|| anyhow!("stream {id} was abandoned"));
                }
                if let Some(reply) = self.reads.remove(&(conn, id)) {
                    let _ = reply.send(Err(anyhow!("stream {id} was abandoned")));
                }
            }
            Command::Read { conn, id, reply } => {
                self.reads.insert((conn, id), reply);
                self.progress_read(conn, id);
            }
            Command::Close { conn, reason } => {
                if let Some(c) = self.endpoint.connection(conn) {
                    c.close(now, 0, reason.as_bytes());
                }
            }
            Command::ControllerPolicies(policies) => {
                self.policies.set_controller_policies(policies);
                for conn in self.endpoint.connection_handles() {
                    self.apply_policy(conn);
                }
            }
            Command::Status { reply } => {
                let connections = self
                    .endpoint
                    .connection_handles()
                    .into_iter()
                    .filter_map(|h| self.endpoint.connection(h).map(|c| (h, c.stats())))
                    .collect();
                let policies = self
                    .endpoint
                    .connection_handles()
                    .into_iter()
                    .filter_map(|h| self.policies.governing(h).map(|p| (h, p.clone())))
                    .collect();
                let _ = reply.send(Ok(Status {
                    identity: self.endpoint.identity(),
                    local_addresses: self.endpoint.local_addresses().to_vec(),
                    endpoint: self.endpoint.stats(),
                    connections,
                    policies,
                    sections: self.sections.stats(),
                    sections_held: self.sections.len(),
                }));
            }
            Command::ConnectionStats { conn, reply } => {
                let _ = reply.send(Ok(self.endpoint.connection_stats(conn)));
            }
            Command::BindLocal { local, reply } => {
                let _ = reply.send(self.bind(local));
            }
            Command::RouteThrough { peer, relay } => self.sections.route_through(peer, relay),
            Command::Address(event) => self.on_address_event(event),
            Command::PeerAddresses { conn, addresses, reply } => {
                let known = self.endpoint.connection_stats(conn).is_some();
                if known {
                    tracing::debug!("{conn}: the registry has the peer at {addresses:?}");
                    self.endpoint.peer_addresses_changed(now, conn, &addresses);
                }
                let _ = reply.send(Ok(known));
            }
        }
    }

    fn apply_policy(&mut self, conn: ConnectionHandle) {
        if let Some(c) = self.endpoint.connection(conn) {
            self.policies.resolve(conn, c);
        }
    }

    fn gone(&self, conn: ConnectionHandle) -> anyhow::Error {
        match self.closed.get(conn) {
            Some(reason) => anyhow!("connection closed: {reason}"),
            None => anyhow!("connection {conn} does not exist"),
        }
    }

    fn open(&mut self, conn: ConnectionHandle, reply: Reply<StreamId>) {
        let result = match self.endpoint.connection(conn) {
            Some(c) => c.open_stream(),
            None => {
                let _ = reply.send(Err(self.gone(conn)));
                return;
            }
        };
        match result {
            Ok(id) => {
                let _ = reply.send(Ok(id));
            }
            // Wait for the peer to raise its limit (StreamsAvailable).
            Err(StreamError::StreamLimit { .. }) => self.opening.entry(conn).or_default().push(reply),
            Err(err) => {
                let _ = reply.send(Err(err.into()));
            }
        }
    }

    /// Moves parked writes of the stream into its send buffer, oldest first, until one does not fit.
    fn progress_write(&mut self, conn: ConnectionHandle, id: StreamId) {
        let Some(mut queue) = self.writes.remove(&(conn, id)) else { return };
        let now = self.now();
        let Some(c) = self.endpoint.connection(conn) else {
            let gone = self.gone(conn);
            for pending in queue {
                pending.fail(|| anyhow!("{gone:#}"));
            }
            return;
        };
        while let Some(mut pending) = queue.pop_front() {
            while pending.written < pending.data.len() {
                match c.write(now, id, &pending.data[pending.written..]) {
                    Ok(0) | Err(StreamError::Blocked(_)) => {
                        // Resumed by StreamWritable.
                        queue.push_front(pending);
                        self.writes.insert((conn, id), queue);
                        return;
                    }
                    Ok(n) => pending.written += n,
                    Err(err) => {
                        let err = anyhow::Error::from(err);
                        pending.fail(|| anyhow!("{err:#}"));
                        for pending in queue {
                            pending.fail(|| anyhow!("{err:#}"));
                        }
                        return;
                    }
                }
            }
            let _ = pending.reply.send(Ok(()));
            if let Some(reply) = pending.finish {
                let _ = reply.send(c.finish(id).map_err(anyhow::Error::from));
            }
        }
    }

    fn finish(&mut self, conn: ConnectionHandle, id: StreamId, reply: Reply<()>) {
        let result = match self.endpoint.connection(conn) {
            Some(c) => c.finish(id).map_err(anyhow::Error::from),
            None => Err(self.gone(conn)),
        };
        let _ = reply.send(result);
    }

    fn progress_read(&mut self, conn: ConnectionHandle, id: StreamId) {
        let Some(reply) = self.reads.remove(&(conn, id)) else { return };
        let Some(c) = self.endpoint.connection(conn) else {
            let _ = reply.send(Err(self.gone(conn)));
            return;
        };
        let result = match c.read(id, &mut self.read_buffer) {
            // Reads are often one packet's worth: copy what arrived out of a reused buffer rather than allocate
            // and zero a whole chunk each time.
            Ok(ReadOutcome::Data(n)) => Ok(Some(self.read_buffer[..n].to_vec())),
            Ok(ReadOutcome::Finished) => Ok(None),
            Ok(ReadOutcome::Reset { error_code }) => {
                Err(anyhow!("the peer reset stream {id} (error code {error_code})"))
            }
            Ok(ReadOutcome::Blocked) => {
                // Resumed by StreamReadable.
                self.reads.insert((conn, id), reply);
                return;
            }
            Err(err) => Err(err.into()),
        };
        let _ = reply.send(result);
    }

    /// Handles every event the endpoint has; whether there was any.
    fn process_events(&mut self) -> bool {
        let mut any = false;
        while let Some((conn, event)) = self.endpoint.poll_event() {
            any = true;
            match event {
                Event::Connected { peer } => {
                    tracing::info!("{conn} connected to {peer}");
                    let _ = self.connected.send((conn, peer));
                    self.apply_policy(conn);
                    if let Some(reply) = self.connecting.remove(&conn) {
                        let _ = reply.send(Ok(conn));
                    }
                }
                Event::HandshakeFailed { reason } => {
                    if let Some(reply) = self.connecting.remove(&conn) {
                        let _ = reply.send(Err(anyhow!("handshake failed: {reason}")));
                    }
                }
                Event::StreamOpened(id) => {
                    if let Some(c) = self.endpoint.connection(conn) {
                        while c.accept_stream().is_some() {}
                    }
                    match self.accepting.pop_front() {
                        Some(reply) => {
                            let _ = reply.send(Ok((conn, id)));
                        }
                        None => self.incoming.push_back((conn, id)),
                    }
                }
                Event::StreamReadable(id) | Event::StreamReset { id, .. } => self.progress_read(conn, id),
                Event::StreamWritable(id) | Event::StreamStopped { id, .. } => self.progress_write(conn, id),
                Event::StreamsAvailable => {
                    for reply in self.opening.remove(&conn).unwrap_or_default() {
                        self.open(conn, reply);
                    }
                }
                Event::StreamFinished(_) => {}
                Event::ChannelUp(channel) => {
                    tracing::info!("{conn}: channel {channel} up");
                    // Its addresses may be what a policy matches.
                    self.apply_policy(conn);
                }
                Event::ChannelDown(channel) => tracing::warn!("{conn}: channel {channel} down"),
                Event::Closed { reason } => {
                    tracing::info!("{conn} closed: {reason}");
                    self.closed.insert(conn, reason.to_string());
                    self.policies.forget(conn);
                    self.fail_connection(conn);
                }
            }
        }
        any
    }

    /// Answers every request parked on a connection that is gone.
    fn fail_connection(&mut self, conn: ConnectionHandle) {
        let error = |driver: &Driver| driver.gone(conn);
        if let Some(reply) = self.connecting.remove(&conn) {
            let _ = reply.send(Err(error(self)));
        }
        for reply in self.opening.remove(&conn).unwrap_or_default() {
            let _ = reply.send(Err(error(self)));
        }
        let writes: Vec<_> = self.writes.keys().filter(|(c, _)| *c == conn).copied().collect();
        for key in writes {
            for pending in self.writes.remove(&key).unwrap_or_default() {
                pending.fail(|| error(self));
            }
        }
        let reads: Vec<_> = self.reads.keys().filter(|(c, _)| *c == conn).copied().collect();
        for key in reads {
            if let Some(reply) = self.reads.remove(&key) {
                let _ = reply.send(Err(error(self)));
            }
        }
    }
}

/// Ready once any socket may have datagrams waiting; never without sockets.
async fn any_readable(sockets: &HashMap<SocketAddr, Arc<Socket>>) {
    std::future::poll_fn(|cx| {
        // An error is ready too: the receive reports it.
        if sockets.values().any(|socket| socket.poll_recv_ready(cx).is_ready()) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
        None => std::future::pending().await,
    }
}

/// The endpoint's time: how long ago the driver started.
fn since(epoch: Instant) -> Time {
    Time::from_nanos(u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
}

/// Sends one batch from its socket; returns the batch's buffer.
async fn send(socket: Option<Arc<Socket>>, batch: Batch) -> Vec<u8> {
    let to = batch.to;
    if let Some(socket) = socket {
        if let Err(err) = socket.send(to.local, to.remote, to.ecn, &batch.bytes, batch.segment).await {
            // A lost datagram is the flow layer's business; say why once in a while.
            tracing::debug!("send from {} to {}: {err}", to.local, to.remote);
        }
    }
    batch.bytes
}
