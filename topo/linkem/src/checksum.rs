//! Internet checksums (RFC 1071): the IPv4 header checksum, and completing the TCP or UDP checksum of a frame whose
//! sender left it to checksum offload.
//!
//! A host whose interface has transmit checksum offload on (`ethtool -K IFACE tx on`, the default on veths) hands
//! TCP and UDP packets to the driver with only the pseudo-header sum in the checksum field (CHECKSUM_PARTIAL); the
//! device is meant to finish it. linkem reads such frames from a packet socket, where nothing ever finishes them, so
//! the receiving host would drop every one. linkem recomputes the checksum from the IP and transport headers instead.

use std::fmt;

const IPV4_HEADER_MIN_LEN: usize = 20;
const IPV6_HEADER_LEN: usize = 40;
const PROTOCOL_TCP: u8 = 6;
const PROTOCOL_UDP: u8 = 17;
/// IPv6 extension headers with the generic layout (next header, length in 8-byte units beyond the first 8) that do
/// not change the pseudo-header: hop-by-hop options and destination options.
const IPV6_HOP_BY_HOP: u8 = 0;
const IPV6_DESTINATION_OPTIONS: u8 = 60;
const IPV6_FRAGMENT: u8 = 44;

/// The transport protocol whose checksum was completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    Udp,
}

impl Transport {
    fn from_protocol(protocol: u8) -> Option<Transport> {
        match protocol {
            PROTOCOL_TCP => Some(Transport::Tcp),
            PROTOCOL_UDP => Some(Transport::Udp),
            _ => None,
        }
    }

    fn protocol(self) -> u8 {
        match self {
            Transport::Tcp => PROTOCOL_TCP,
            Transport::Udp => PROTOCOL_UDP,
        }
    }

    fn checksum_offset(self) -> usize {
        match self {
            Transport::Tcp => 16,
            Transport::Udp => 6,
        }
    }

    fn header_len(self) -> usize {
        match self {
            Transport::Tcp => 20,
            Transport::Udp => 8,
        }
    }
}

/// Why a frame's transport checksum was left as it came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotCompleted {
    /// The network header is neither IPv4 nor IPv6, or the frame ends inside a header.
    NotIp,
    /// The packet is not TCP or UDP (after IPv6 hop-by-hop and destination options); carries the protocol number.
    Protocol(u8),
    /// A fragment: only whole datagrams carry the transport header the checksum covers.
    Fragment,
}

impl fmt::Display for NotCompleted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotCompleted::NotIp => write!(f, "not a complete IPv4 or IPv6 packet"),
            NotCompleted::Protocol(protocol) => write!(f, "IP protocol {protocol} is not TCP or UDP"),
            NotCompleted::Fragment => write!(f, "an IP fragment"),
        }
    }
}

/// One's-complement sum of big-endian 16-bit words, an odd last byte padded with zero, not yet folded.
fn sum_words(data: &[u8]) -> u64 {
    data.chunks(2).map(|pair| u64::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]))).sum()
}

/// Folds the carries back in and complements: the checksum of everything summed.
fn finish(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The checksum over an IPv4 header, its checksum field included as given (zero it first to compute one; a valid
/// header gives 0).
pub fn ipv4_header_checksum(header: &[u8]) -> u16 {
    finish(sum_words(header))
}

/// The IP packet's addresses and transport segment, as the pseudo-header needs them.
struct Located {
    pseudo_header_sum: u64,
    transport: Transport,
    /// Byte range of the transport header and payload within the packet.
    segment: std::ops::Range<usize>,
}

fn locate_ipv4(packet: &[u8]) -> Result<Located, NotCompleted> {
    let header_len = usize::from(packet.first().ok_or(NotCompleted::NotIp)? & 0x0f) * 4;
    if packet.len() < IPV4_HEADER_MIN_LEN || header_len < IPV4_HEADER_MIN_LEN || packet.len() < header_len {
        return Err(NotCompleted::NotIp);
    }
    let total_len = usize::from(u16::from_be_bytes([packet[2], packet[3]]));
    if total_len < header_len || total_len > packet.len() {
        return Err(NotCompleted::NotIp);
    }
    // More-fragments flag or a fragment offset.
    if u16::from_be_bytes([packet[6], packet[7]]) & 0x3fff != 0 {
        return Err(NotCompleted::Fragment);
    }
    let transport = Transport::from_protocol(packet[9]).ok_or(NotCompleted::Protocol(packet[9]))?;
    let segment_len = (total_len - header_len) as u64;
    let pseudo_header_sum = sum_words(&packet[12..20]) + u64::from(transport.protocol()) + segment_len;
    Ok(Located { pseudo_header_sum, transport, segment: header_len..total_len })
}

fn locate_ipv6(packet: &[u8]) -> Result<Located, NotCompleted> {
    if packet.len() < IPV6_HEADER_LEN {
        return Err(NotCompleted::NotIp);
    }
    let end = IPV6_HEADER_LEN + usize::from(u16::from_be_bytes([packet[4], packet[5]]));
    if end > packet.len() {
        return Err(NotCompleted::NotIp);
    }
    let (mut next_header, mut offset) = (packet[6], IPV6_HEADER_LEN);
    while matches!(next_header, IPV6_HOP_BY_HOP | IPV6_DESTINATION_OPTIONS) {
        let extension = packet.get(offset..offset + 2).filter(|_| offset + 2 <= end).ok_or(NotCompleted::NotIp)?;
        next_header = extension[0];
        offset += (usize::from(extension[1]) + 1) * 8;
    }
    if next_header == IPV6_FRAGMENT {
        return Err(NotCompleted::Fragment);
    }
    let transport = Transport::from_protocol(next_header).ok_or(NotCompleted::Protocol(next_header))?;
    if offset > end {
        return Err(NotCompleted::NotIp);
    }
    let segment_len = (end - offset) as u64;
    let pseudo_header_sum = sum_words(&packet[8..40]) + u64::from(transport.protocol()) + segment_len;
    Ok(Located { pseudo_header_sum, transport, segment: offset..end })
}

/// Computes the TCP or UDP checksum of the IP packet at `network_offset` in `frame` and writes it into the transport
/// header, whatever the checksum field held before (a sender using offload leaves the pseudo-header sum there).
pub fn complete_transport_checksum(frame: &mut [u8], network_offset: usize) -> Result<Transport, NotCompleted> {
    let packet = frame.get_mut(network_offset..).ok_or(NotCompleted::NotIp)?;
    let located = match packet.first().map(|byte| byte >> 4) {
        Some(4) => locate_ipv4(packet)?,
        Some(6) => locate_ipv6(packet)?,
        _ => return Err(NotCompleted::NotIp),
    };
    let transport = located.transport;
    let segment = &mut packet[located.segment];
    if segment.len() < transport.header_len() {
        return Err(NotCompleted::NotIp);
    }
    let field = transport.checksum_offset()..transport.checksum_offset() + 2;
    segment[field.clone()].copy_from_slice(&[0, 0]);
    let mut checksum = finish(located.pseudo_header_sum + sum_words(segment));
    // In UDP, 0 means "no checksum"; a computed 0 is sent as its one's-complement twin (RFC 768).
    if transport == Transport::Udp && checksum == 0 {
        checksum = 0xffff;
    }
    segment[field].copy_from_slice(&checksum.to_be_bytes());
    Ok(transport)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ETHERNET_HEADER_LEN: usize = 14;

    fn hex(text: &str) -> Vec<u8> {
        let digits: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
        digits.chunks(2).map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap()).collect()
    }

    fn ethernet(ethertype: u16, packet: &[u8]) -> Vec<u8> {
        let mut frame = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1];
        frame.extend_from_slice(&ethertype.to_be_bytes());
        frame.extend_from_slice(packet);
        frame
    }

    // Packets with correct checksums, computed independently (Python, RFC 1071 over the pseudo-header and segment).
    /// IPv4 TCP SYN 10.77.0.1:40000 -> 10.77.0.2:5201 with MSS and window-scale options: checksum 0xb00d.
    const IPV4_TCP: &str = "450000341c464000400609e20a4d00010a4d0002 9c401451000003e8000000008002faf0b00d0000 \
                            020405b40103030700000000";
    /// IPv4 UDP 10.77.0.1:5000 -> 10.77.0.2:5001, payload "hello linkem!" (odd length): checksum 0x1ee2.
    const IPV4_UDP: &str = "4500002900004000401126280a4d00010a4d0002 1388138900151ee2 68656c6c6f206c696e6b656d21";
    /// IPv6 UDP [fd00::1]:5000 -> [fd00::2]:5001, payload "hello": checksum 0x9aec.
    const IPV6_UDP: &str = "60000000000d1140 fd000000000000000000000000000001 fd000000000000000000000000000002 \
                            13881389000d9aec 68656c6c6f";

    fn checksum_at(frame: &[u8], offset: usize) -> u16 {
        u16::from_be_bytes([frame[offset], frame[offset + 1]])
    }

    /// Puts what a sender with checksum offload leaves in the field: the folded pseudo-header sum, not complemented.
    fn make_partial(frame: &mut [u8], field: usize, pseudo_header_sum: u16) {
        frame[field..field + 2].copy_from_slice(&pseudo_header_sum.to_be_bytes());
    }

    #[test]
    fn completes_an_ipv4_tcp_checksum_left_to_offload() {
        let correct = ethernet(0x0800, &hex(IPV4_TCP));
        let field = ETHERNET_HEADER_LEN + 20 + 16;
        assert_eq!(checksum_at(&correct, field), 0xb00d);
        let mut frame = correct.clone();
        // The pseudo-header sum of this packet, as the sending kernel leaves it.
        make_partial(&mut frame, field, 0x14c3);
        assert_eq!(complete_transport_checksum(&mut frame, ETHERNET_HEADER_LEN), Ok(Transport::Tcp));
        assert_eq!(frame, correct);
    }

    #[test]
    fn completes_ipv4_udp_with_an_odd_payload_and_ipv6_udp() {
        for (ethertype, packet, field, expected) in
            [(0x0800, IPV4_UDP, 20 + 6, 0x1ee2), (0x86dd, IPV6_UDP, 40 + 6, 0x9aec)]
        {
            let correct = ethernet(ethertype, &hex(packet));
            let field = ETHERNET_HEADER_LEN + field;
            assert_eq!(checksum_at(&correct, field), expected);
            let mut frame = correct.clone();
            make_partial(&mut frame, field, 0x1234);
            assert_eq!(complete_transport_checksum(&mut frame, ETHERNET_HEADER_LEN), Ok(Transport::Udp));
            assert_eq!(frame, correct, "{packet}");
        }
    }

    #[test]
    fn follows_the_network_offset_past_a_vlan_tag_and_ignores_ethernet_padding() {
        let plain = ethernet(0x0800, &hex(IPV4_UDP));
        let mut tagged = plain[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
        tagged.extend_from_slice(&plain[12..]);
        tagged.extend_from_slice(&[0xee; 6]); // padding beyond the IP total length is not part of the datagram
        let mut frame = tagged.clone();
        make_partial(&mut frame, 18 + 26, 0);
        assert_eq!(complete_transport_checksum(&mut frame, 18), Ok(Transport::Udp));
        assert_eq!(frame, tagged);
    }

    #[test]
    fn walks_ipv6_destination_options_to_the_transport_header() {
        let plain = hex(IPV6_UDP);
        // Insert an 8-byte destination-options header (next header UDP, padding option) after the fixed header.
        let mut packet = plain[..40].to_vec();
        packet[6] = IPV6_DESTINATION_OPTIONS;
        packet[4..6].copy_from_slice(&(13u16 + 8).to_be_bytes());
        packet.extend_from_slice(&[PROTOCOL_UDP, 0, 1, 4, 0, 0, 0, 0]);
        packet.extend_from_slice(&plain[40..]);
        let mut frame = ethernet(0x86dd, &packet);
        // The pseudo-header is unchanged (addresses, UDP length, protocol), so the checksum is the same.
        assert_eq!(complete_transport_checksum(&mut frame, ETHERNET_HEADER_LEN), Ok(Transport::Udp));
        assert_eq!(checksum_at(&frame, ETHERNET_HEADER_LEN + 48 + 6), 0x9aec);
    }

    #[test]
    fn a_udp_checksum_of_zero_is_sent_as_all_ones() {
        let mut frame = ethernet(0x0800, &hex(IPV4_UDP));
        let field = ETHERNET_HEADER_LEN + 26;
        // Add the checksum (0x1ee2) to the last whole payload word ("em" -> 0x844f): the sum becomes all ones, the
        // computed checksum 0.
        let last = frame.len() - 1;
        frame[last - 2..last].copy_from_slice(&0x844fu16.to_be_bytes());
        complete_transport_checksum(&mut frame, ETHERNET_HEADER_LEN).unwrap();
        assert_eq!(checksum_at(&frame, field), 0xffff);
    }

    #[test]
    fn leaves_fragments_other_protocols_and_garbage_alone() {
        let mut fragment = ethernet(0x0800, &hex(IPV4_UDP));
        fragment[ETHERNET_HEADER_LEN + 6] |= 0x20; // more fragments
        let before = fragment.clone();
        assert_eq!(complete_transport_checksum(&mut fragment, ETHERNET_HEADER_LEN), Err(NotCompleted::Fragment));
        assert_eq!(fragment, before);

        let mut icmp = ethernet(0x0800, &hex(IPV4_UDP));
        icmp[ETHERNET_HEADER_LEN + 9] = 1;
        assert_eq!(complete_transport_checksum(&mut icmp, ETHERNET_HEADER_LEN), Err(NotCompleted::Protocol(1)));

        let mut truncated = ethernet(0x0800, &hex(IPV4_TCP));
        truncated.truncate(ETHERNET_HEADER_LEN + 30);
        assert_eq!(complete_transport_checksum(&mut truncated, ETHERNET_HEADER_LEN), Err(NotCompleted::NotIp));
        assert_eq!(complete_transport_checksum(&mut [0x45, 0], 14), Err(NotCompleted::NotIp));
        assert_eq!(complete_transport_checksum(&mut [0u8; 60], ETHERNET_HEADER_LEN), Err(NotCompleted::NotIp));
    }

    #[test]
    fn ipv4_header_checksum_matches_a_known_header() {
        // Example header from Wikipedia's "IPv4 header checksum" article: checksum 0xb861.
        let header = hex("450000730000400040110000c0a80001c0a800c7");
        assert_eq!(ipv4_header_checksum(&header), 0xb861);
    }
}
