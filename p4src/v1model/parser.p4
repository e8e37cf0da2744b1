/*
 * v1model parser: Ethernet / IPv4 / TCP / UDP / tng. tng is recognised on UDP destination or
 * source port TNG_UDP_PORT and checked against every receiver rule of wire-format section 8, in
 * order; a failed rule rejects the packet with its own error (ingress maps it to a drop reason).
 * The datagram length is the UDP length, so Ethernet padding never counts as tng bytes.
 */
#ifndef TNG_V1MODEL_PARSER_P4
#define TNG_V1MODEL_PARSER_P4

#include <core.p4>
#include <v1model.p4>

#include "shared/header.p4"

error {
    TngTooLarge,
    TngTruncatedHeader,
    TngBadVersion,
    TngUnknownType,
    TngReservedFlags,
    TngLengthMismatch,
    TngHandshakeLength,
    TngBadStage,
    TngInitialTooSmall,
    TngShortSealedPayload,
    TngBadSection
}

parser TngParser(packet_in packet,
                 out headers_t hdr,
                 inout local_metadata_t local_md,
                 inout standard_metadata_t std_md) {

    state start {
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
            (TNG_UDP_PORT, _): check_tng_size;
            (_, TNG_UDP_PORT): check_tng_size;
            default: accept;
        }
    }

    /* Rules 0 and 1: the datagram is UDP length - 8 bytes. */
    state check_tng_size {
        verify(hdr.udp.length <= UDP_HEADER_BYTES + TNG_MAX_PACKET_BYTES, error.TngTooLarge);
        verify(hdr.udp.length >= UDP_HEADER_BYTES + TNG_FLOW_HEADER_BYTES, error.TngTruncatedHeader);
        transition parse_tng_flow;
    }

    /* Rules 2-5, then rule 6 by packet type. */
    state parse_tng_flow {
        packet.extract(hdr.tng_flow);
        verify(hdr.tng_flow.version == TNG_VERSION, error.TngBadVersion);
        verify(hdr.tng_flow.packet_type >= TNG_TYPE_INITIAL && hdr.tng_flow.packet_type <= TNG_TYPE_SECTION_ACK,
               error.TngUnknownType);
        verify((hdr.tng_flow.flags & TNG_FLAGS_RESERVED) == 0, error.TngReservedFlags);
        verify(hdr.tng_flow.payload_length == hdr.udp.length - (UDP_HEADER_BYTES + TNG_FLOW_HEADER_BYTES),
               error.TngLengthMismatch);
        transition select(hdr.tng_flow.packet_type) {
            TNG_TYPE_INITIAL: parse_tng_initial;
            TNG_TYPE_RETRY: parse_tng_retry;
            TNG_TYPE_SECTION: parse_tng_section;
            TNG_TYPE_SECTION_ACK: check_tng_section_ack;
            default: check_tng_sealed;
        }
    }

    /* Lengths are summed in 32 bits so that two large 16-bit lengths cannot wrap around. */
    state parse_tng_initial {
        verify(hdr.tng_flow.payload_length >= TNG_INITIAL_PREFIX_BYTES, error.TngHandshakeLength);
        packet.extract(hdr.tng_initial);
        verify(TNG_INITIAL_PREFIX_BYTES + (bit<32>)hdr.tng_initial.token_length
                   + (bit<32>)hdr.tng_initial.noise_length <= (bit<32>)hdr.tng_flow.payload_length,
               error.TngHandshakeLength);
        verify(hdr.tng_initial.stage >= TNG_STAGE_CLIENT_HELLO && hdr.tng_initial.stage <= TNG_STAGE_CLIENT_FINISH,
               error.TngBadStage);
        verify(hdr.tng_initial.stage == TNG_STAGE_SERVER
                   || hdr.tng_flow.payload_length >= TNG_MIN_CLIENT_INITIAL_BYTES - TNG_FLOW_HEADER_BYTES,
               error.TngInitialTooSmall);
        transition accept;
    }

    state parse_tng_retry {
        verify(hdr.tng_flow.payload_length >= TNG_RETRY_PREFIX_BYTES, error.TngHandshakeLength);
        packet.extract(hdr.tng_retry);
        verify(TNG_RETRY_PREFIX_BYTES + (bit<32>)hdr.tng_retry.token_length == (bit<32>)hdr.tng_flow.payload_length,
               error.TngHandshakeLength);
        transition accept;
    }

    state parse_tng_section {
        verify(hdr.tng_flow.payload_length >= TNG_SECTION_PREFIX_BYTES + TNG_FLOW_HEADER_BYTES, error.TngBadSection);
        packet.extract(hdr.tng_section);
        verify(hdr.tng_section.section_version == TNG_SECTION_VERSION, error.TngBadSection);
        transition accept;
    }

    state check_tng_section_ack {
        verify(hdr.tng_flow.payload_length > 0, error.TngBadSection);
        transition accept;
    }

    state check_tng_sealed {
        verify(hdr.tng_flow.payload_length >= TNG_AEAD_TAG_BYTES, error.TngShortSealedPayload);
        transition accept;
    }
}

#endif  // TNG_V1MODEL_PARSER_P4
