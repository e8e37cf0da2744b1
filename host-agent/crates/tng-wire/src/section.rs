//! The section encapsulation (wire-format section 10): a SECTION payload is a small cleartext prefix naming the next
//! hop, then one end-to-end tng packet exactly as its sender sealed it. A relay terminates the section (its own packet
//! numbers, acknowledgements and congestion controller) and forwards the inner packet without holding any key.

use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6};

use crate::error::WireError;
use crate::limits::{HEADER_LEN, SECTION_PREFIX_LEN, SECTION_VERSION};
use crate::reader::Reader;

/// A SECTION payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Section<'a> {
    /// Where the relay sends the inner packet: an IPv6 address (IPv4 as `::ffff:a.b.c.d`) and port, or the
    /// unspecified address `[::]:0` for "the peer this relay learned for the connection id" (or, on an on-path
    /// relay, the packet's own IP destination).
    pub next_hop: SocketAddrV6,
    /// The end-to-end packet, byte for byte as its sender built it (at least a flow header).
    pub inner: &'a [u8],
}

impl<'a> Section<'a> {
    /// A section carrying `inner` to `next_hop` (`None`: the hop the relay already knows).
    pub fn new(next_hop: Option<SocketAddr>, inner: &'a [u8]) -> Self {
        let next_hop = match next_hop {
            None => SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 0, 0, 0),
            Some(SocketAddr::V4(v4)) => SocketAddrV6::new(v4.ip().to_ipv6_mapped(), v4.port(), 0, 0),
            Some(SocketAddr::V6(v6)) => SocketAddrV6::new(*v6.ip(), v6.port(), 0, 0),
        };
        Self { next_hop, inner }
    }

    /// The next hop as a socket address, IPv4-mapped addresses as IPv4; `None` for the unspecified next hop.
    pub fn next_hop(&self) -> Option<SocketAddr> {
        let ip = self.next_hop.ip();
        if ip.is_unspecified() && self.next_hop.port() == 0 {
            return None;
        }
        Some(match ip.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), self.next_hop.port()),
            None => SocketAddr::new((*ip).into(), self.next_hop.port()),
        })
    }

    pub(crate) fn encoded_len(&self) -> usize {
        SECTION_PREFIX_LEN + self.inner.len()
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.push(SECTION_VERSION);
        out.extend_from_slice(&self.next_hop.port().to_be_bytes());
        out.extend_from_slice(&self.next_hop.ip().octets());
        out.extend_from_slice(self.inner);
    }

    /// Rule 6 for SECTION: the length first, then the section version. The inner packet is not parsed here: its
    /// receiver (the relay's next hop) applies every rule to it.
    pub(crate) fn parse(payload: &'a [u8]) -> Result<Self, WireError> {
        if payload.len() < SECTION_PREFIX_LEN + HEADER_LEN {
            return Err(WireError::BadSection { reason: "shorter than its prefix and an inner flow header" });
        }
        let mut reader = Reader::new(payload);
        let short = WireError::BadSection { reason: "truncated prefix" };
        let version = reader.u8().ok_or(short)?;
        let port = reader.u16().ok_or(short)?;
        let address = reader.array::<16>().ok_or(short)?;
        if version != SECTION_VERSION {
            return Err(WireError::BadSection { reason: "unknown section version" });
        }
        Ok(Self { next_hop: SocketAddrV6::new(address.into(), port, 0, 0), inner: reader.rest() })
    }
}

/// Rule 6 for SECTION_ACK: its cleartext frames must not be empty (which frames it may hold is the relay core's rule).
pub(crate) fn parse_section_ack(payload: &[u8]) -> Result<&[u8], WireError> {
    if payload.is_empty() {
        Err(WireError::BadSection { reason: "empty SECTION_ACK" })
    } else {
        Ok(payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_hop_maps_ipv4_and_the_unspecified_hop() {
        let v4: SocketAddr = "192.0.2.7:4477".parse().expect("address");
        assert_eq!(Section::new(Some(v4), &[]).next_hop(), Some(v4));
        let v6: SocketAddr = "[2001:db8::1]:9".parse().expect("address");
        assert_eq!(Section::new(Some(v6), &[]).next_hop(), Some(v6));
        assert_eq!(Section::new(None, &[]).next_hop(), None);
    }

    #[test]
    fn prefix_is_version_port_address_then_the_inner_packet() {
        let inner = [0xcc; HEADER_LEN];
        let section = Section::new(Some("10.0.0.1:258".parse().expect("address")), &inner);
        let mut out = Vec::new();
        section.encode(&mut out);
        let mut expected = vec![1, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1];
        expected.extend_from_slice(&inner);
        assert_eq!(out, expected);
        assert_eq!(section.encoded_len(), out.len());
        assert_eq!(Section::parse(&out), Ok(section));
    }

    #[test]
    fn short_payloads_and_other_versions_are_bad_sections() {
        let mut payload = vec![SECTION_VERSION];
        payload.resize(SECTION_PREFIX_LEN + HEADER_LEN - 1, 0);
        assert_eq!(Section::parse(&payload).map_err(|e| e.as_str()), Err("bad_section"));
        payload.push(0);
        assert!(Section::parse(&payload).is_ok());
        payload[0] = 2;
        assert_eq!(Section::parse(&payload), Err(WireError::BadSection { reason: "unknown section version" }));
        assert_eq!(parse_section_ack(&[]).map_err(|e| e.as_str()), Err("bad_section"));
        assert_eq!(parse_section_ack(&[0]), Ok(&[0][..]));
    }
}
