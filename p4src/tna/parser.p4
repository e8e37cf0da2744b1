/*
 * TNA wire parser: Ethernet / IPv4 / TCP / UDP / tng, the same headers as v1model/parser.p4. Tofino's parser has no
 * custom errors and no verify(), so it only extracts: the receiver rules of wire-format section 8 are checked, in
 * their order, by WireDropReason (tna/drop_reason.p4) on the fields extracted here. The IPv4 header checksum is
 * verified with a parser Checksum.
 */
#ifndef TNG_TNA_PARSER_P4
#define TNG_TNA_PARSER_P4

#include <core.p4>
#include <tna.p4>

#include "shared/header.p4"

parser TngParser(packet_in packet, out headers_t hdr, inout local_metadata_t local_md, out bool ipv4_checksum_error) {
    Checksum() ipv4_checksum;

    state start {
        ipv4_checksum_error = false;
        transition parse_ethernet;
    }

    state parse_ethernet {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }

    /* Only option-less, unfragmented (or first-fragment) IPv4 carries a parsed L4 header. */
    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        ipv4_checksum.add(hdr.ipv4);
        ipv4_checksum_error = !ipv4_checksum.verify();
        transition select(hdr.ipv4.ihl, hdr.ipv4.frag_offset, hdr.ipv4.protocol) {
            (IPV4_IHL_MIN, 0, IP_PROTO_TCP): parse_tcp;
            (IPV4_IHL_MIN, 0, IP_PROTO_UDP): parse_udp;
            default: accept;
        }
    }

    state parse_tcp {
        packet.extract(hdr.tcp);
        transition accept;
    }

    state parse_udp {
        packet.extract(hdr.udp);
        transition select(hdr.udp.dst_port, hdr.udp.src_port) {
            (TNG_UDP_PORT, _): parse_tng_flow;
            (_, TNG_UDP_PORT): parse_tng_flow;
            default: accept;
        }
    }

    state parse_tng_flow {
        packet.extract(hdr.tng_flow);
        transition select(hdr.tng_flow.packet_type) {
            TNG_TYPE_INITIAL: parse_tng_initial;
            TNG_TYPE_RETRY: parse_tng_retry;
            TNG_TYPE_SECTION: parse_tng_section;
            default: accept;
        }
    }

    state parse_tng_initial {
        packet.extract(hdr.tng_initial);
        transition accept;
    }

    state parse_tng_retry {
        packet.extract(hdr.tng_retry);
        transition accept;
    }

    state parse_tng_section {
        packet.extract(hdr.tng_section);
        transition accept;
    }
}

#endif  // TNG_TNA_PARSER_P4
