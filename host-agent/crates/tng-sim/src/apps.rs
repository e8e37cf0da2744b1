//! The applications on the simulated hosts, driving real tng-proto connections.
//!
//! Every transfer is a request/response on a client-opened stream. The request starts with a kind byte and the
//! 8-byte big-endian size of the transfer ([`UNBOUNDED`] = until the run ends). A download's request ends there
//! (FIN), and the response is that many bytes of [`crate::content`] for the stream, then FIN. An upload's request
//! goes on with that many content bytes, then FIN, and the response is just FIN. Whoever reads checks every byte.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use tng_proto::{ConnectionHandle, Endpoint, Event, Identity, ReadOutcome, StreamError, StreamId, Time};

use crate::content;
use crate::ledger::Ledger;
use crate::scenario::{Direction, Mode};
use crate::transport::recovery_transmissions;
use crate::workload::{ClientPlan, UNBOUNDED};

const REQUEST_LEN: usize = 9;
const KIND_DOWNLOAD: u8 = 0;
const KIND_UPLOAD: u8 = 1;
/// Largest piece of content handed to a connection at once.
const WRITE_CHUNK: usize = 16 * 1024;
/// Size of the buffer client applications read into; one is shared by all (see [`ClientApp::on_event`]).
pub const READ_CHUNK: usize = 64 * 1024;

pub fn to_time(at: Duration) -> Time {
    Time::ZERO + at
}

/// What a transfer is, for accounting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TransferKind {
    /// The `usize`-th requester's flow: the next one starts when it completes.
    Flow(usize),
    Burst,
}

#[derive(Clone, Copy, Debug)]
struct Transfer {
    kind: TransferKind,
    size: u64,
    started: Duration,
}

/// A transfer waiting for the server's response: its content (a download) or just FIN (an upload).
#[derive(Clone, Copy, Debug)]
struct Download {
    transfer: Transfer,
    received: u64,
    /// Response bytes to read: the transfer's size for a download, none for an upload.
    expected: u64,
}

/// An upload still being handed to its connection.
#[derive(Clone, Copy, Debug)]
struct Upload {
    written: u64,
    total: u64,
}

/// Content bytes written from one buffer, refilled only when the next write is of other bytes (a write the
/// connection refused is retried with the same ones).
struct ContentWriter {
    buffer: Vec<u8>,
    /// What `buffer` holds: (stream, offset, length).
    holds: Option<(StreamId, u64, usize)>,
}

impl ContentWriter {
    fn new() -> ContentWriter {
        ContentWriter { buffer: vec![0; WRITE_CHUNK], holds: None }
    }

    /// The content of `stream` from `offset`, at most `WRITE_CHUNK` bytes and no more than `remaining`.
    fn content(&mut self, stream: StreamId, offset: u64, remaining: u64) -> &[u8] {
        let len = usize::try_from(remaining.min(WRITE_CHUNK as u64)).unwrap_or(WRITE_CHUNK);
        if self.holds != Some((stream, offset, len)) {
            content::fill(stream.as_u64(), offset, &mut self.buffer[..len]);
            self.holds = Some((stream, offset, len));
        }
        &self.buffer[..len]
    }
}

/// The client application of one host.
pub struct ClientApp {
    client: usize,
    mode: Mode,
    /// (local, remote) address pairs a new connection starts with: every path, or path 0 only.
    paths: Vec<(SocketAddr, SocketAddr)>,
    requesters: Vec<VecDeque<u64>>,
    remaining_transfers: usize,
    /// The long-lived connection of the tng and single-path modes, and whether it is usable yet.
    shared_connection: Option<(ConnectionHandle, bool)>,
    /// Transfers waiting for the shared connection.
    waiting: VecDeque<Transfer>,
    /// Connection-per-flow: connections being set up, each for one transfer.
    dialing: BTreeMap<ConnectionHandle, Transfer>,
    downloads: BTreeMap<(ConnectionHandle, StreamId), Download>,
    uploads: BTreeMap<(ConnectionHandle, StreamId), Upload>,
    /// Uploading clients only: a download-only client costs no write buffer.
    writer: Option<ContentWriter>,
}

impl ClientApp {
    pub fn new(
        client: usize,
        mode: Mode,
        direction: Direction,
        paths: Vec<(SocketAddr, SocketAddr)>,
        plan: &ClientPlan,
    ) -> ClientApp {
        ClientApp {
            client,
            mode,
            paths,
            requesters: plan.requesters.clone(),
            remaining_transfers: plan.total_flows(),
            shared_connection: None,
            waiting: VecDeque::new(),
            dialing: BTreeMap::new(),
            downloads: BTreeMap::new(),
            uploads: BTreeMap::new(),
            writer: (direction == Direction::Upload).then(ContentWriter::new),
        }
    }

    pub fn is_done(&self) -> bool {
        self.remaining_transfers == 0
    }

    /// The client's address on path `path` changed: connections opened from now on use the new one.
    pub fn local_address_changed(&mut self, path: usize, new: SocketAddr) {
        if let Some(pair) = self.paths.get_mut(path) {
            pair.0 = new;
        }
    }

    /// Opens the shared connection (if the mode has one) and starts every requester's first flow.
    pub fn start(&mut self, now: Duration, endpoint: &mut Endpoint, ledger: &mut Ledger) {
        if self.mode != Mode::ConnectionPerFlow {
            match endpoint.connect(to_time(now), &self.paths, None) {
                Ok(handle) => {
                    ledger.handshakes += 1;
                    self.shared_connection = Some((handle, false));
                }
                Err(_) => ledger.failed_connections += 1,
            }
        }
        for requester in 0..self.requesters.len() {
            self.start_next_flow(now, requester, endpoint, ledger);
        }
    }

    /// Starts a burst of `size` bytes.
    pub fn start_burst(&mut self, now: Duration, size: u64, endpoint: &mut Endpoint, ledger: &mut Ledger) {
        self.begin(now, Transfer { kind: TransferKind::Burst, size, started: now }, endpoint, ledger);
    }

    /// Reacts to an event of one of its connections. `read_buffer` is scratch space to read into, shared by every
    /// client so that a client costs no memory for it.
    pub fn on_event(
        &mut self,
        now: Duration,
        handle: ConnectionHandle,
        event: Event,
        endpoint: &mut Endpoint,
        ledger: &mut Ledger,
        read_buffer: &mut [u8],
    ) {
        match event {
            Event::Connected { .. } => {
                if let Some((shared, ready)) = &mut self.shared_connection {
                    if *shared == handle {
                        *ready = true;
                        self.send_waiting(now, handle, endpoint, ledger);
                    }
                }
                if let Some(transfer) = self.dialing.remove(&handle) {
                    self.request(now, handle, transfer, endpoint, ledger);
                }
            }
            Event::StreamReadable(stream) => self.read(now, (handle, stream), endpoint, ledger, read_buffer),
            Event::StreamWritable(stream) => self.write_upload(now, (handle, stream), endpoint, ledger),
            Event::StreamsAvailable if self.shared_connection == Some((handle, true)) => {
                self.send_waiting(now, handle, endpoint, ledger);
            }
            Event::StreamReset { .. } => ledger.failed_transfers += 1,
            Event::HandshakeFailed { .. } | Event::Closed { .. } => {
                let unfinished = self.dialing.contains_key(&handle)
                    || self.downloads.keys().any(|&(connection, _)| connection == handle)
                    || self.shared_connection.is_some_and(|(shared, _)| shared == handle);
                if unfinished && !self.is_done() {
                    ledger.failed_connections += 1;
                }
            }
            _ => {}
        }
    }

    /// Sends waiting requests in order until the peer's stream limit stops them.
    fn send_waiting(&mut self, now: Duration, handle: ConnectionHandle, endpoint: &mut Endpoint, ledger: &mut Ledger) {
        while let Some(transfer) = self.waiting.pop_front() {
            if !self.request(now, handle, transfer, endpoint, ledger) {
                break;
            }
        }
    }

    fn start_next_flow(&mut self, now: Duration, requester: usize, endpoint: &mut Endpoint, ledger: &mut Ledger) {
        if let Some(size) = self.requesters[requester].pop_front() {
            self.begin(now, Transfer { kind: TransferKind::Flow(requester), size, started: now }, endpoint, ledger);
        }
    }

    fn begin(&mut self, now: Duration, transfer: Transfer, endpoint: &mut Endpoint, ledger: &mut Ledger) {
        match self.shared_connection {
            // Behind transfers already waiting for stream credit, to keep request order.
            Some((handle, true)) if self.waiting.is_empty() => {
                self.request(now, handle, transfer, endpoint, ledger);
            }
            Some(_) => self.waiting.push_back(transfer),
            None => match endpoint.connect(to_time(now), &self.paths[..1], None) {
                Ok(handle) => {
                    ledger.handshakes += 1;
                    self.dialing.insert(handle, transfer);
                }
                Err(_) => ledger.failed_connections += 1,
            },
        }
    }

    /// Opens a stream and sends the request. Returns false if the peer's stream limit is reached: the transfer
    /// then waits for `StreamsAvailable`.
    fn request(
        &mut self,
        now: Duration,
        handle: ConnectionHandle,
        transfer: Transfer,
        endpoint: &mut Endpoint,
        ledger: &mut Ledger,
    ) -> bool {
        let Some(connection) = endpoint.connection(handle) else {
            ledger.failed_connections += 1;
            return true;
        };
        let stream = match connection.open_stream() {
            Ok(stream) => stream,
            Err(StreamError::StreamLimit { .. }) => {
                self.waiting.push_front(transfer);
                return false;
            }
            Err(_) => {
                ledger.failed_transfers += 1;
                return true;
            }
        };
        let upload = self.writer.is_some();
        let mut request = [0u8; REQUEST_LEN];
        request[0] = if upload { KIND_UPLOAD } else { KIND_DOWNLOAD };
        request[1..].copy_from_slice(&transfer.size.to_be_bytes());
        let written = connection.write(to_time(now), stream, &request);
        if !matches!(written, Ok(REQUEST_LEN)) || (!upload && connection.finish(stream).is_err()) {
            ledger.failed_transfers += 1;
            return true;
        }
        let expected = if upload { 0 } else { transfer.size };
        self.downloads.insert((handle, stream), Download { transfer, received: 0, expected });
        if upload {
            self.uploads.insert((handle, stream), Upload { written: 0, total: transfer.size });
            self.write_upload(now, (handle, stream), endpoint, ledger);
        }
        true
    }

    /// Hands an upload's content to its connection until the stream's credit or send buffer stops it
    /// (`StreamWritable` resumes it), then finishes the stream.
    fn write_upload(
        &mut self,
        now: Duration,
        (handle, stream): (ConnectionHandle, StreamId),
        endpoint: &mut Endpoint,
        ledger: &mut Ledger,
    ) {
        let (Some(upload), Some(writer)) = (self.uploads.get_mut(&(handle, stream)), self.writer.as_mut()) else {
            return;
        };
        let Some(connection) = endpoint.connection(handle) else {
            return;
        };
        while upload.written < upload.total {
            let content = writer.content(stream, upload.written, upload.total - upload.written);
            let Ok(accepted) = connection.write(to_time(now), stream, content) else {
                return;
            };
            upload.written += accepted as u64;
            ledger.on_written(now, accepted as u64);
            if accepted < content.len() {
                return;
            }
        }
        if connection.finish(stream).is_err() {
            ledger.failed_transfers += 1;
        }
        self.uploads.remove(&(handle, stream));
    }

    fn read(
        &mut self,
        now: Duration,
        (handle, stream): (ConnectionHandle, StreamId),
        endpoint: &mut Endpoint,
        ledger: &mut Ledger,
        read_buffer: &mut [u8],
    ) {
        let Some(download) = self.downloads.get_mut(&(handle, stream)) else {
            return;
        };
        let Some(connection) = endpoint.connection(handle) else {
            return;
        };
        let finished = loop {
            match connection.read(stream, read_buffer) {
                Ok(ReadOutcome::Data(len)) => {
                    let data = &read_buffer[..len];
                    let corrupted = content::count_corrupted(stream.as_u64(), download.received, data);
                    download.received += len as u64;
                    ledger.on_delivered(now, self.client, len as u64, corrupted);
                }
                Ok(ReadOutcome::Finished) => break true,
                Ok(ReadOutcome::Blocked) => break false,
                Ok(ReadOutcome::Reset { .. }) | Err(_) => {
                    ledger.failed_transfers += 1;
                    break false;
                }
            }
        };
        if !finished {
            return;
        }
        let Some(download) = self.downloads.remove(&(handle, stream)) else {
            return;
        };
        let transfer = download.transfer;
        if download.received != download.expected {
            ledger.failed_transfers += 1;
        }
        let elapsed = now.saturating_sub(transfer.started);
        self.remaining_transfers = self.remaining_transfers.saturating_sub(1);
        if self.mode == Mode::ConnectionPerFlow {
            if let Some(connection) = endpoint.connection(handle) {
                connection.close(to_time(now), 0, b"done");
            }
        }
        match transfer.kind {
            TransferKind::Burst => ledger.burst_completion_times.push(elapsed),
            TransferKind::Flow(requester) => {
                ledger.flow_completion_times.push(elapsed);
                self.start_next_flow(now, requester, endpoint, ledger);
            }
        }
        if self.is_done() {
            ledger.finished_at[self.client] = Some(now);
        }
    }
}

/// A response the server application has handed to its connection in full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WrittenResponse {
    pub client: usize,
    pub connection: ConnectionHandle,
    /// The connection's total of stream bytes written once this response was.
    pub bytes_written_mark: u64,
    /// The connection's loss-recovery transmissions at that moment.
    pub recovery_mark: u64,
}

/// Where the server is with one stream.
#[derive(Clone, Debug, PartialEq, Eq)]
enum ServerStream {
    /// Reading the request's kind and size.
    Request(Vec<u8>),
    /// A download's request was read: its FIN comes next.
    Requested { size: u64 },
    /// Reading an upload's content.
    Upload { received: u64, total: u64 },
    /// Writing the response.
    Response { written: u64, total: u64 },
    /// Done (answered, or the request was malformed); later events on the stream are ignored.
    Answered,
}

/// The server application: answers every download with the asked-for number of content bytes, and reads and checks
/// every upload.
pub struct ServerApp {
    /// The client host of each identity, to tell which client a connection belongs to.
    client_identities: BTreeMap<Identity, usize>,
    clients_by_connection: BTreeMap<ConnectionHandle, usize>,
    streams: BTreeMap<(ConnectionHandle, StreamId), ServerStream>,
    written: Vec<WrittenResponse>,
    writer: ContentWriter,
    read_buffer: Vec<u8>,
}

impl ServerApp {
    /// A server for clients 0, 1, ... with these identities.
    pub fn new(client_identities: Vec<Identity>) -> ServerApp {
        ServerApp::with_clients(client_identities.into_iter().enumerate().map(|(client, id)| (id, client)).collect())
    }

    /// A server for the clients with these (identity, client number) pairs.
    pub fn with_clients(clients: Vec<(Identity, usize)>) -> ServerApp {
        ServerApp {
            client_identities: clients.into_iter().collect(),
            clients_by_connection: BTreeMap::new(),
            streams: BTreeMap::new(),
            written: Vec::new(),
            writer: ContentWriter::new(),
            read_buffer: vec![0; WRITE_CHUNK],
        }
    }

    pub fn on_event(
        &mut self,
        now: Duration,
        handle: ConnectionHandle,
        event: Event,
        endpoint: &mut Endpoint,
        ledger: &mut Ledger,
    ) {
        match event {
            Event::Connected { peer } => {
                if let Some(&client) = self.client_identities.get(&peer) {
                    self.clients_by_connection.insert(handle, client);
                }
            }
            Event::StreamOpened(stream) | Event::StreamReadable(stream) => {
                self.read_request(now, handle, stream, endpoint, ledger);
            }
            Event::StreamWritable(stream) => self.write_response(now, handle, stream, endpoint, ledger),
            Event::StreamStopped { .. } => ledger.failed_transfers += 1,
            Event::Closed { .. } => {
                self.clients_by_connection.remove(&handle);
                self.streams.retain(|&(connection, _), _| connection != handle);
            }
            _ => {}
        }
    }

    /// Responses written in full since the last call.
    pub fn take_written(&mut self) -> Vec<WrittenResponse> {
        std::mem::take(&mut self.written)
    }

    /// Reads what the stream holds: the request, then a download's FIN or an upload's content.
    fn read_request(
        &mut self,
        now: Duration,
        handle: ConnectionHandle,
        stream: StreamId,
        endpoint: &mut Endpoint,
        ledger: &mut Ledger,
    ) {
        let client = self.clients_by_connection.get(&handle).copied();
        let state = self.streams.entry((handle, stream)).or_insert_with(|| ServerStream::Request(Vec::new()));
        let Some(connection) = endpoint.connection(handle) else {
            return;
        };
        let buffer = &mut self.read_buffer;
        loop {
            // What is left of the request, or any byte after it (which a download's request must not have).
            let want = match state {
                ServerStream::Request(request) => REQUEST_LEN - request.len(),
                ServerStream::Requested { .. } | ServerStream::Upload { .. } => buffer.len(),
                ServerStream::Response { .. } | ServerStream::Answered => return,
            };
            let outcome = match connection.read(stream, &mut buffer[..want]) {
                Ok(ReadOutcome::Blocked) => return,
                Ok(outcome @ (ReadOutcome::Data(_) | ReadOutcome::Finished)) => outcome,
                Ok(ReadOutcome::Reset { .. }) | Err(_) => {
                    ledger.failed_transfers += 1;
                    *state = ServerStream::Answered;
                    return;
                }
            };
            match (&mut *state, outcome) {
                (ServerStream::Request(request), ReadOutcome::Data(len)) => {
                    request.extend_from_slice(&buffer[..len]);
                    if let Ok(header) = <[u8; REQUEST_LEN]>::try_from(request.as_slice()) {
                        let size = u64::from_be_bytes(header[1..].try_into().unwrap_or_default());
                        *state = match header[0] {
                            KIND_DOWNLOAD => ServerStream::Requested { size },
                            KIND_UPLOAD => ServerStream::Upload { received: 0, total: size },
                            _ => {
                                ledger.failed_transfers += 1;
                                ServerStream::Answered
                            }
                        };
                    }
                }
                (ServerStream::Upload { received, .. }, ReadOutcome::Data(len)) => {
                    let data = &buffer[..len];
                    let corrupted = content::count_corrupted(stream.as_u64(), *received, data);
                    *received += len as u64;
                    if let Some(client) = client {
                        ledger.on_delivered(now, client, len as u64, corrupted);
                    }
                }
                (ServerStream::Upload { received, total }, ReadOutcome::Finished) => {
                    if *total != UNBOUNDED && received != total {
                        ledger.failed_transfers += 1;
                    }
                    // The upload's response: FIN alone.
                    if connection.finish(stream).is_err() {
                        ledger.failed_transfers += 1;
                    }
                    *state = ServerStream::Answered;
                    return;
                }
                (ServerStream::Requested { size }, ReadOutcome::Finished) => {
                    *state = ServerStream::Response { written: 0, total: *size };
                    break;
                }
                // A request cut short, or bytes after a download's request.
                _ => {
                    ledger.failed_transfers += 1;
                    *state = ServerStream::Answered;
                    return;
                }
            }
        }
        self.write_response(now, handle, stream, endpoint, ledger);
    }

    fn write_response(
        &mut self,
        now: Duration,
        handle: ConnectionHandle,
        stream: StreamId,
        endpoint: &mut Endpoint,
        ledger: &mut Ledger,
    ) {
        let Some(state) = self.streams.get_mut(&(handle, stream)) else {
            return;
        };
        let ServerStream::Response { written, total } = state else {
            return;
        };
        let Some(connection) = endpoint.connection(handle) else {
            return;
        };
        while *written < *total {
            let content = self.writer.content(stream, *written, *total - *written);
            // A full send buffer refuses the write; `StreamWritable` resumes it.
            let Ok(accepted) = connection.write(to_time(now), stream, content) else {
                return;
            };
            *written += accepted as u64;
            ledger.on_written(now, accepted as u64);
            if accepted < content.len() {
                return;
            }
        }
        if *total == UNBOUNDED {
            return;
        }
        if connection.finish(stream).is_err() {
            ledger.failed_transfers += 1;
        }
        *state = ServerStream::Answered;
        if let Some(&client) = self.clients_by_connection.get(&handle) {
            self.written.push(WrittenResponse {
                client,
                connection: handle,
                bytes_written_mark: connection.stats().streams.bytes_written,
                recovery_mark: recovery_transmissions(connection),
            });
        }
    }
}
