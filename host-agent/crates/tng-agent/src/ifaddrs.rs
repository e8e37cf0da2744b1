//! The host's interface addresses (getifaddrs), for registering a socket bound to the unspecified address.
#![allow(unsafe_code)] // getifaddrs hands out a C linked list; this and sockopt.rs are the agent's only unsafe code.

use std::net::IpAddr;

/// The host's non-loopback, non-link-local unicast addresses.
pub fn interface_addresses() -> Vec<IpAddr> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list we only read and then free with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Vec::new();
    }
    let mut ips = Vec::new();
    let mut cursor = list;
    while !cursor.is_null() {
        // SAFETY: `cursor` is a node of the list getifaddrs returned, valid until freeifaddrs.
        let entry = unsafe { &*cursor };
        cursor = entry.ifa_next;
        if entry.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: ifa_addr points to a sockaddr whose family says which sockaddr_* it is.
        let ip = unsafe {
            match i32::from((*entry.ifa_addr).sa_family) {
                libc::AF_INET => {
                    let v4 = &*entry.ifa_addr.cast::<libc::sockaddr_in>();
                    IpAddr::from(u32::from_be(v4.sin_addr.s_addr).to_be_bytes())
                }
                libc::AF_INET6 => IpAddr::from((*entry.ifa_addr.cast::<libc::sockaddr_in6>()).sin6_addr.s6_addr),
                _ => continue,
            }
        };
        let link_local = match ip {
            IpAddr::V4(v4) => v4.is_link_local(),
            IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
        };
        if !ip.is_loopback() && !link_local {
            ips.push(ip);
        }
    }
    // SAFETY: `list` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(list) };
    ips
}
