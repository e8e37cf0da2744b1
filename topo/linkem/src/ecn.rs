//! ECN congestion-experienced marking on Ethernet frames carrying IPv4 or IPv6.

use crate::checksum::ipv4_header_checksum;

const ETHERNET_HEADER_LEN: usize = 14;
const VLAN_TAG_LEN: usize = 4;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ECN_MASK: u8 = 0b11;
const ECN_NOT_ECT: u8 = 0b00;
const ECN_CE: u8 = 0b11;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EcnOutcome {
    /// The packet was ECT(0) or ECT(1) and now carries CE.
    Marked,
    /// The packet already carried CE.
    AlreadyCe,
    /// Not ECN-capable, not IP, or too short to be a valid IP header: left untouched.
    NotEct,
}

fn ethertype_and_l3_offset(frame: &[u8]) -> Option<(u16, usize)> {
    let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    if ethertype == ETHERTYPE_VLAN {
        let inner = u16::from_be_bytes([*frame.get(16)?, *frame.get(17)?]);
        return Some((inner, ETHERNET_HEADER_LEN + VLAN_TAG_LEN));
    }
    Some((ethertype, ETHERNET_HEADER_LEN))
}

/// Sets CE on an ECN-capable IP packet inside an Ethernet frame, fixing the IPv4 header checksum.
pub fn mark_congestion_experienced(frame: &mut [u8]) -> EcnOutcome {
    let Some((ethertype, l3)) = ethertype_and_l3_offset(frame) else {
        return EcnOutcome::NotEct;
    };
    match ethertype {
        ETHERTYPE_IPV4 => mark_ipv4(&mut frame[l3..]),
        ETHERTYPE_IPV6 => mark_ipv6(&mut frame[l3..]),
        _ => EcnOutcome::NotEct,
    }
}

fn mark_ipv4(packet: &mut [u8]) -> EcnOutcome {
    let Some(&version_ihl) = packet.first() else {
        return EcnOutcome::NotEct;
    };
    let header_len = usize::from(version_ihl & 0x0f) * 4;
    if version_ihl >> 4 != 4 || header_len < 20 || packet.len() < header_len {
        return EcnOutcome::NotEct;
    }
    match packet[1] & ECN_MASK {
        ECN_NOT_ECT => return EcnOutcome::NotEct,
        ECN_CE => return EcnOutcome::AlreadyCe,
        _ => {}
    }
    packet[1] |= ECN_CE;
    // Recompute the whole header checksum rather than patch it incrementally: the header is at most 60 bytes.
    packet[10..12].copy_from_slice(&[0, 0]);
    let checksum = ipv4_header_checksum(&packet[..header_len]);
    packet[10..12].copy_from_slice(&checksum.to_be_bytes());
    EcnOutcome::Marked
}

fn mark_ipv6(packet: &mut [u8]) -> EcnOutcome {
    // The traffic class spans the low nibble of byte 0 and the high nibble of byte 1; ECN is bits 4-5 of byte 1.
    if packet.len() < 40 || packet[0] >> 4 != 6 {
        return EcnOutcome::NotEct;
    }
    match (packet[1] >> 4) & ECN_MASK {
        ECN_NOT_ECT => EcnOutcome::NotEct,
        ECN_CE => EcnOutcome::AlreadyCe,
        _ => {
            packet[1] |= ECN_CE << 4;
            EcnOutcome::Marked
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet frame with a 20-byte IPv4 header (valid checksum) and 8 payload bytes.
    fn ipv4_frame(tos: u8) -> Vec<u8> {
        let mut frame = vec![0u8; 12];
        frame.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        let mut header = vec![0x45, tos, 0, 28, 0x12, 0x34, 0x40, 0, 64, 17, 0, 0, 10, 77, 0, 1, 10, 77, 0, 2];
        let checksum = ipv4_header_checksum(&header);
        header[10..12].copy_from_slice(&checksum.to_be_bytes());
        frame.extend_from_slice(&header);
        frame.extend_from_slice(&[0xab; 8]);
        frame
    }

    fn header_verifies(frame: &[u8]) -> bool {
        // A correct header sums (checksum included) to 0xffff, so its complement is zero.
        ipv4_header_checksum(&frame[14..34]) == 0
    }

    #[test]
    fn marks_ect_ipv4_and_keeps_the_checksum_valid() {
        for ect in [0b10, 0b01] {
            let mut frame = ipv4_frame(0xb8 | ect);
            assert!(header_verifies(&frame));
            assert_eq!(mark_congestion_experienced(&mut frame), EcnOutcome::Marked);
            assert_eq!(frame[15], 0xb8 | ECN_CE, "DSCP kept, ECN set to CE");
            assert!(header_verifies(&frame));
            assert_eq!(&frame[34..], &[0xab; 8], "payload untouched");
        }
    }

    #[test]
    fn leaves_not_ect_ce_and_non_ip_alone() {
        let mut not_ect = ipv4_frame(0xb8);
        let before = not_ect.clone();
        assert_eq!(mark_congestion_experienced(&mut not_ect), EcnOutcome::NotEct);
        assert_eq!(not_ect, before);
        let mut ce = ipv4_frame(0x03);
        assert_eq!(mark_congestion_experienced(&mut ce), EcnOutcome::AlreadyCe);
        let mut arp = ipv4_frame(0x02);
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(mark_congestion_experienced(&mut arp), EcnOutcome::NotEct);
        let mut truncated = ipv4_frame(0x02);
        truncated.truncate(20);
        assert_eq!(mark_congestion_experienced(&mut truncated), EcnOutcome::NotEct);
        assert_eq!(mark_congestion_experienced(&mut []), EcnOutcome::NotEct);
    }

    #[test]
    fn marks_vlan_tagged_ipv4_and_ipv6() {
        let plain = ipv4_frame(0x02);
        let mut tagged = plain[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
        tagged.extend_from_slice(&plain[12..]);
        assert_eq!(mark_congestion_experienced(&mut tagged), EcnOutcome::Marked);
        assert_eq!(tagged[19] & ECN_MASK, ECN_CE);
        assert_eq!(ipv4_header_checksum(&tagged[18..38]), 0);

        let mut ipv6 = vec![0u8; 12];
        ipv6.extend_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
        ipv6.extend_from_slice(&[0x60, 0x20, 0, 0]); // traffic class 0x02: ECT(0)
        ipv6.resize(14 + 40, 0);
        assert_eq!(mark_congestion_experienced(&mut ipv6), EcnOutcome::Marked);
        assert_eq!(ipv6[15], 0x30);
    }
}
