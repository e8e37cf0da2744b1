/*
 * TNA: the wire checks of v1model/parser.p4 and v1model/drop_reason.p4, as one control over the extracted fields
 * (Tofino's parser cannot raise custom errors). The rules are checked in wire-format section 8's order, so a packet
 * gets the same reason as on v1model; a frame that ends inside a header the parser needed is PACKET_TOO_SHORT unless
 * an earlier length rule already names its fault (on v1model those rules run before the short header is extracted).
 */
#ifndef TNG_TNA_DROP_REASON_P4
#define TNG_TNA_DROP_REASON_P4

#include <core.p4>
#include <tna.p4>

#include "shared/define.p4"
#include "shared/header.p4"

control WireDropReason(in headers_t hdr, in bit<16> parser_err, in bool ipv4_checksum_error,
                       out drop_reason_t reason) {
    /* Tofino's gateways compare a field with a constant (and read a few bytes): a comparison of two fields is the
     * sign of their difference, computed by an action of its own (one operation per field per action). */
    bit<16> length_mismatch = 0;   // UDP length - payload_length: the headers' length when they agree
    bit<16> handshake_bytes = 0;   // INITIAL: token + noise lengths
    bit<16> handshake_spare = 0;   // INITIAL: payload - token - noise; RETRY: payload - token (bit 15: negative)
    /* Saturated differences, nonzero when the length is past the bound: x > c is x |-| c != 0, x < c is c |-| x != 0
     * (a gateway compares 16-bit fields for equality, not order). */
    bit<16> udp_too_large = 0;
    bit<16> udp_too_short = 0;
    bit<16> payload_below_prefix = 0;
    bit<16> payload_below_initial = 0;
    bit<16> payload_below_section = 0;
    bit<16> payload_below_tag = 0;
    bit<16> spare_below_prefix = 0;
    bool tng = false;

    @hidden
    action take_length_bounds() {
        udp_too_large = hdr.udp.length |-| (UDP_HEADER_BYTES + TNG_MAX_PACKET_BYTES);
        udp_too_short = (UDP_HEADER_BYTES + TNG_FLOW_HEADER_BYTES) |-| hdr.udp.length;
        payload_below_prefix = TNG_INITIAL_PREFIX_BYTES |-| hdr.tng_flow.payload_length;
        payload_below_initial = (TNG_MIN_CLIENT_INITIAL_BYTES - TNG_FLOW_HEADER_BYTES) |-| hdr.tng_flow.payload_length;
        payload_below_section = (TNG_SECTION_PREFIX_BYTES + TNG_FLOW_HEADER_BYTES) |-| hdr.tng_flow.payload_length;
        payload_below_tag = TNG_AEAD_TAG_BYTES |-| hdr.tng_flow.payload_length;
    }

    @hidden
    action take_spare_bound() {
        spare_below_prefix = TNG_INITIAL_PREFIX_BYTES |-| handshake_spare;
    }

    @hidden
    action take_length_mismatch() {
        length_mismatch = hdr.udp.length - hdr.tng_flow.payload_length;
    }

    @hidden
    action take_handshake_bytes() {
        handshake_bytes = hdr.tng_initial.token_length + hdr.tng_initial.noise_length;
    }

    @hidden
    action take_initial_spare() {
        handshake_spare = hdr.tng_flow.payload_length - handshake_bytes;
    }

    @hidden
    action take_retry_spare() {
        handshake_spare = hdr.tng_flow.payload_length - hdr.tng_retry.token_length;
    }

    apply {
        reason = DROP_REASON_NONE;
        if (hdr.udp.isValid()) {
            if (hdr.udp.dst_port == TNG_UDP_PORT) {
                tng = true;
            } else if (hdr.udp.src_port == TNG_UDP_PORT) {
                tng = true;
            }
        }
        bit<16> payload = hdr.tng_flow.payload_length;
        take_length_bounds();
        if (tng) {
            if (udp_too_large != 0) {
                reason = DROP_TOO_LARGE;
            } else if (udp_too_short != 0) {
                reason = DROP_TRUNCATED_HEADER;
            }
        }
        if (reason != DROP_REASON_NONE) {
            return;
        }
        if ((parser_err & PARSER_ERROR_PARTIAL_HDR) != 0) {
            reason = DROP_PACKET_TOO_SHORT;
        } else if (parser_err != PARSER_ERROR_OK) {
            reason = DROP_OTHER_PARSER_ERROR;
        } else if (hdr.tng_flow.isValid()) {
            take_length_mismatch();
            if (hdr.tng_flow.version != TNG_VERSION) {
                reason = DROP_BAD_VERSION;
            } else if (hdr.tng_flow.packet_type < TNG_TYPE_INITIAL || hdr.tng_flow.packet_type > TNG_TYPE_SECTION_ACK) {
                reason = DROP_UNKNOWN_TYPE;
            } else if ((hdr.tng_flow.flags & TNG_FLAGS_RESERVED) != 0) {
                reason = DROP_RESERVED_FLAGS;
            } else if (length_mismatch != UDP_HEADER_BYTES + TNG_FLOW_HEADER_BYTES) {
                reason = DROP_LENGTH_MISMATCH;
            } else if (hdr.tng_initial.isValid()) {
                take_handshake_bytes();
                take_initial_spare();
                take_spare_bound();
                /* The spare bytes are negative (bit 15; tng packets are below 32 KiB) when the token and noise overrun
                 * the payload. */
                if (payload_below_prefix != 0 || handshake_spare[15:15] == 1 || spare_below_prefix != 0) {
                    reason = DROP_HANDSHAKE_LENGTH;
                } else if (hdr.tng_initial.stage < TNG_STAGE_CLIENT_HELLO
                           || hdr.tng_initial.stage > TNG_STAGE_CLIENT_FINISH) {
                    reason = DROP_BAD_STAGE;
                } else if (hdr.tng_initial.stage != TNG_STAGE_SERVER) {
                    if (payload_below_initial != 0) {
                        reason = DROP_INITIAL_TOO_SMALL;
                    }
                }
            } else if (hdr.tng_retry.isValid()) {
                take_retry_spare();
                if (handshake_spare != TNG_RETRY_PREFIX_BYTES) {
                    reason = DROP_HANDSHAKE_LENGTH;
                }
            } else if (hdr.tng_flow.packet_type == TNG_TYPE_SECTION) {
                if (payload_below_section != 0 || hdr.tng_section.section_version != TNG_SECTION_VERSION) {
                    reason = DROP_BAD_SECTION;
                }
            } else if (hdr.tng_flow.packet_type == TNG_TYPE_SECTION_ACK) {
                if (payload == 0) {
                    reason = DROP_BAD_SECTION;
                }
            } else if (payload_below_tag != 0) {
                reason = DROP_SHORT_SEALED_PAYLOAD;
            }
        }
        if (reason == DROP_REASON_NONE && ipv4_checksum_error) {
            reason = DROP_IPV4_CHECKSUM;
        }
    }
}

#endif  // TNG_TNA_DROP_REASON_P4
