//! Local address changes from the kernel (rtnetlink address events). A bound address replaced by another address of
//! the same family on the same interface (renumbering: DHCP, a new prefix, a radio re-attaching) becomes a migration
//! of the channels bound to it; see [`Renumbering`].

use std::net::IpAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use netlink_packet_core::{NetlinkBuffer, NetlinkMessage, NetlinkPayload};
use netlink_packet_route::address::{AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage, AddressScope};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::protocols::NETLINK_ROUTE;
use netlink_sys::{AsyncSocket, AsyncSocketExt, SocketAddr, TokioSocket};

/// How long a removed address waits for its replacement (and a new address for the removal it replaces).
pub const RENUMBERING_WINDOW: Duration = Duration::from_secs(10);

/// An address that appeared on or disappeared from an interface (by index).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressEvent {
    Added { interface: u32, ip: IpAddr },
    Removed { interface: u32, ip: IpAddr },
}

/// Subscribes to IPv4 and IPv6 address events and hands each to `deliver` until it returns false.
pub fn watch(mut deliver: impl FnMut(AddressEvent) -> bool + Send + 'static) -> Result<()> {
    let mut socket = TokioSocket::new(NETLINK_ROUTE).context("cannot open a netlink socket")?;
    let groups = (libc::RTMGRP_IPV4_IFADDR | libc::RTMGRP_IPV6_IFADDR) as u32;
    socket.socket_mut().bind(&SocketAddr::new(0, groups)).context("cannot subscribe to netlink address events")?;
    tokio::spawn(async move {
        loop {
            let bytes = match socket.recv_from_full().await {
                Ok((bytes, _)) => bytes,
                Err(err) if err.raw_os_error() == Some(libc::ENOBUFS) => {
                    // Events were lost while we were busy; later ones still arrive.
                    tracing::warn!("netlink address events were lost: {err}");
                    continue;
                }
                Err(err) => {
                    tracing::warn!("local address changes are no longer followed: {err}");
                    return;
                }
            };
            for event in parse(&bytes) {
                tracing::debug!("netlink: {event:?}");
                if !deliver(event) {
                    return;
                }
            }
        }
    });
    Ok(())
}

/// The address events in one netlink datagram (it may carry several messages).
fn parse(mut bytes: &[u8]) -> Vec<AddressEvent> {
    let mut events = Vec::new();
    while let Ok(buffer) = NetlinkBuffer::new_checked(bytes) {
        let length = buffer.length() as usize;
        if let Ok(message) = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&bytes[..length]) {
            if let NetlinkPayload::InnerMessage(inner) = message.payload {
                events.extend(address_event(inner));
            }
        }
        // Messages are aligned to 4 bytes.
        let next = (length + 3) & !3;
        if length == 0 || next >= bytes.len() {
            break;
        }
        bytes = &bytes[next..];
    }
    events
}

fn address_event(message: RouteNetlinkMessage) -> Option<AddressEvent> {
    match message {
        RouteNetlinkMessage::NewAddress(message) if usable(&message) => {
            Some(AddressEvent::Added { interface: message.header.index, ip: local_ip(&message)? })
        }
        RouteNetlinkMessage::DelAddress(message) => {
            Some(AddressEvent::Removed { interface: message.header.index, ip: local_ip(&message)? })
        }
        _ => None,
    }
}

/// The interface's own address: IFA_LOCAL where present (it differs from IFA_ADDRESS on point-to-point links).
fn local_ip(message: &AddressMessage) -> Option<IpAddr> {
    let find = |local: bool| {
        message.attributes.iter().find_map(|attribute| match attribute {
            AddressAttribute::Local(ip) if local => Some(*ip),
            AddressAttribute::Address(ip) if !local => Some(*ip),
            _ => None,
        })
    };
    find(true).or_else(|| find(false))
}

/// Whether a socket can use the address now: global or site scope, and not waiting for (or failed) duplicate address
/// detection; the kernel announces a tentative address again once DAD is done.
fn usable(message: &AddressMessage) -> bool {
    let flags = message.attributes.iter().find_map(|attribute| match attribute {
        AddressAttribute::Flags(flags) => Some(*flags),
        _ => None,
    });
    let pending = match flags {
        Some(flags) => flags.intersects(AddressFlags::Tentative | AddressFlags::Dadfailed),
        None => message.header.flags.intersects(AddressHeaderFlags::Tentative | AddressHeaderFlags::Dadfailed),
    };
    matches!(message.header.scope, AddressScope::Universe | AddressScope::Site) && !pending
}

/// Pairs a bound address that disappeared with an address of the same family that appeared on the same interface
/// within [`RENUMBERING_WINDOW`], in either order. A removed address that comes back is forgotten: the socket bound
/// to it works again.
#[derive(Default)]
pub struct Renumbering {
    removed: Vec<Seen>,
    added: Vec<Seen>,
}

struct Seen {
    interface: u32,
    ip: IpAddr,
    at: Instant,
}

impl Renumbering {
    /// Feeds one event; returns `(old, new)` when a bound address (per `is_bound`) was replaced.
    pub fn on_event(
        &mut self,
        now: Instant,
        event: AddressEvent,
        is_bound: impl Fn(IpAddr) -> bool,
    ) -> Option<(IpAddr, IpAddr)> {
        let fresh = |seen: &Seen| now.saturating_duration_since(seen.at) <= RENUMBERING_WINDOW;
        self.removed.retain(fresh);
        self.added.retain(fresh);
        let partner = |list: &mut Vec<Seen>, interface: u32, ip: IpAddr| {
            let position =
                list.iter().position(|seen| seen.interface == interface && seen.ip.is_ipv4() == ip.is_ipv4())?;
            Some(list.remove(position).ip)
        };
        match event {
            AddressEvent::Removed { interface, ip } => {
                self.added.retain(|seen| seen.ip != ip);
                if !is_bound(ip) {
                    return None;
                }
                if let Some(new) = partner(&mut self.added, interface, ip) {
                    return Some((ip, new));
                }
                self.removed.retain(|seen| seen.ip != ip);
                self.removed.push(Seen { interface, ip, at: now });
                None
            }
            AddressEvent::Added { interface, ip } => {
                let returning = self.removed.len();
                self.removed.retain(|seen| seen.ip != ip);
                if self.removed.len() < returning || is_bound(ip) {
                    // The bound address is back, or the kernel refreshed one we use.
                    return None;
                }
                if let Some(old) = partner(&mut self.removed, interface, ip) {
                    return Some((old, ip));
                }
                self.added.retain(|seen| seen.ip != ip);
                self.added.push(Seen { interface, ip, at: now });
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn bound(ip: IpAddr) -> bool {
        ip == "10.0.0.1".parse::<IpAddr>().unwrap() || ip == "fd00::1".parse::<IpAddr>().unwrap()
    }

    #[test]
    fn a_bound_address_replaced_on_its_interface_migrates() {
        let mut r = Renumbering::default();
        let t = Instant::now();
        assert_eq!(r.on_event(t, AddressEvent::Removed { interface: 2, ip: ip("10.0.0.1") }, bound), None);
        // Another interface's and another family's addresses are not replacements.
        assert_eq!(r.on_event(t, AddressEvent::Added { interface: 3, ip: ip("10.0.1.9") }, bound), None);
        assert_eq!(r.on_event(t, AddressEvent::Added { interface: 2, ip: ip("fd00::9") }, bound), None);
        let replaced = r.on_event(t, AddressEvent::Added { interface: 2, ip: ip("10.0.0.5") }, bound);
        assert_eq!(replaced, Some((ip("10.0.0.1"), ip("10.0.0.5"))));
    }

    #[test]
    fn a_new_address_before_the_removal_pairs_too() {
        let mut r = Renumbering::default();
        let t = Instant::now();
        assert_eq!(r.on_event(t, AddressEvent::Added { interface: 2, ip: ip("fd00::5") }, bound), None);
        let replaced = r.on_event(t, AddressEvent::Removed { interface: 2, ip: ip("fd00::1") }, bound);
        assert_eq!(replaced, Some((ip("fd00::1"), ip("fd00::5"))));
    }

    #[test]
    fn a_returning_address_and_unbound_addresses_change_nothing() {
        let mut r = Renumbering::default();
        let t = Instant::now();
        assert_eq!(r.on_event(t, AddressEvent::Removed { interface: 2, ip: ip("10.0.0.1") }, bound), None);
        assert_eq!(r.on_event(t, AddressEvent::Added { interface: 2, ip: ip("10.0.0.1") }, bound), None);
        assert_eq!(r.on_event(t, AddressEvent::Added { interface: 2, ip: ip("10.0.0.5") }, bound), None);
        assert_eq!(r.on_event(t, AddressEvent::Removed { interface: 2, ip: ip("10.0.0.7") }, bound), None);
        assert_eq!(r.on_event(t, AddressEvent::Added { interface: 2, ip: ip("10.0.0.8") }, bound), None);
    }

    #[test]
    fn a_replacement_after_the_window_is_not_a_migration() {
        let mut r = Renumbering::default();
        let t = Instant::now();
        assert_eq!(r.on_event(t, AddressEvent::Removed { interface: 2, ip: ip("10.0.0.1") }, bound), None);
        let late = t + RENUMBERING_WINDOW + Duration::from_secs(1);
        assert_eq!(r.on_event(late, AddressEvent::Added { interface: 2, ip: ip("10.0.0.5") }, bound), None);
    }

    #[test]
    fn parses_kernel_address_messages() {
        use netlink_packet_core::NetlinkHeader;
        use netlink_packet_route::AddressFamily;
        let message = |new: bool, flags: AddressFlags| {
            let mut address = AddressMessage::default();
            address.header.family = AddressFamily::Inet6;
            address.header.index = 4;
            address.attributes.push(AddressAttribute::Address(ip("fd00::5")));
            address.attributes.push(AddressAttribute::Flags(flags));
            let inner =
                if new { RouteNetlinkMessage::NewAddress(address) } else { RouteNetlinkMessage::DelAddress(address) };
            let mut message = NetlinkMessage::new(NetlinkHeader::default(), NetlinkPayload::InnerMessage(inner));
            message.finalize();
            let mut bytes = vec![0; message.buffer_len()];
            message.serialize(&mut bytes);
            bytes
        };
        let mut two = message(true, AddressFlags::Tentative);
        two.extend(message(true, AddressFlags::Permanent));
        two.extend(message(false, AddressFlags::Permanent));
        // The tentative address is skipped until DAD is done.
        assert_eq!(
            parse(&two),
            vec![
                AddressEvent::Added { interface: 4, ip: ip("fd00::5") },
                AddressEvent::Removed { interface: 4, ip: ip("fd00::5") }
            ]
        );
    }
}
