//! The requests an [`Agent`](super::Agent) sends to the driver task, each with the channel its answer returns on.

use std::collections::HashMap;
use std::net::SocketAddr;

use anyhow::Result;
use tng_proto::{ConnectionHandle, ConnectionStats, EndpointStats, Identity, StreamId};
use tng_relay::SectionStats;
use tokio::sync::oneshot;

use crate::netlink::AddressEvent;
use crate::policy::Policy;
use crate::resolver::PolicyRef;

pub(super) type Reply<T> = oneshot::Sender<Result<T>>;

/// Requests from the application side to the driver.
pub(super) enum Command {
    Connect {
        paths: Vec<(SocketAddr, SocketAddr)>,
        pin: Option<Identity>,
        reply: Reply<ConnectionHandle>,
    },
    Open {
        conn: ConnectionHandle,
        reply: Reply<StreamId>,
    },
    Accept {
        reply: Reply<(ConnectionHandle, StreamId)>,
    },
    Write {
        conn: ConnectionHandle,
        id: StreamId,
        data: Vec<u8>,
        reply: Reply<()>,
    },
    Finish {
        conn: ConnectionHandle,
        id: StreamId,
        reply: Reply<()>,
    },
    /// Abandon both halves of a stream: the application is gone.
    Abandon {
        conn: ConnectionHandle,
        id: StreamId,
    },
    Read {
        conn: ConnectionHandle,
        id: StreamId,
        reply: Reply<Option<Vec<u8>>>,
    },
    Close {
        conn: ConnectionHandle,
        reason: String,
    },
    /// The controller's complete set of policies, replacing the previous one.
    ControllerPolicies(Vec<Policy>),
    Status {
        reply: Reply<Status>,
    },
    /// One connection's counters (`None` once it is gone): what `Status` has for it, without the cost of all the
    /// others.
    ConnectionStats {
        conn: ConnectionHandle,
        reply: Reply<Option<ConnectionStats>>,
    },
    BindLocal {
        local: SocketAddr,
        reply: Reply<SocketAddr>,
    },
    /// Send everything addressed to `peer` through the relay at `relay` (Tng's flow middlebox).
    RouteThrough {
        peer: SocketAddr,
        relay: SocketAddr,
    },
    /// The kernel reported a local address change (netlink).
    Address(AddressEvent),
    /// The peer of `conn` is now at `addresses` (the host registry); the answer is false once `conn` is gone.
    PeerAddresses {
        conn: ConnectionHandle,
        addresses: Vec<SocketAddr>,
        reply: Reply<bool>,
    },
}

/// What `tng status` shows.
#[derive(Clone, Debug)]
pub struct Status {
    pub identity: Identity,
    pub local_addresses: Vec<SocketAddr>,
    pub endpoint: EndpointStats,
    pub connections: Vec<(ConnectionHandle, ConnectionStats)>,
    /// The policy governing each connection that has one.
    pub policies: HashMap<ConnectionHandle, PolicyRef>,
    /// The endpoint's sections to relays: counters, and how many it holds.
    pub sections: SectionStats,
    pub sections_held: usize,
}
