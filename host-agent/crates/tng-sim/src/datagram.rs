//! A UDP datagram as the simulated network carries it.

use std::net::SocketAddr;

/// The two ECN bits of the IP header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Ecn {
    #[default]
    NotEct,
    Ect0,
    Ect1,
    Ce,
}

impl Ecn {
    /// ECN-capable transport: a congested queue may mark instead of dropping.
    pub fn is_ect(self) -> bool {
        matches!(self, Ecn::Ect0 | Ecn::Ect1)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Datagram {
    pub source: SocketAddr,
    pub destination: SocketAddr,
    pub ecn: Ecn,
    /// UDP payload: one tng packet.
    pub payload: Vec<u8>,
}
