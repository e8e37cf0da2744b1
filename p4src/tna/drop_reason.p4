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

/* The bits of WireDropReason's payload_below: the tng payload is shorter than each of these bounds. */
#define PAYLOAD_BELOW_PREFIX 1
#define PAYLOAD_BELOW_TAG 2
#define PAYLOAD_BELOW_SECTION 4
#define PAYLOAD_BELOW_INITIAL 8

control WireDropReason(in headers_t hdr, in bit<16> parser_err, in bool ipv4_checksum_error,
                       out drop_reason_t reason) {
    /* Tofino's gateways compare a field with a constant (and read a few bytes): a comparison of two fields becomes
     * their difference, computed by an action of its own (one operation per field per action). */
    bit<16> length_mismatch = 0;   // UDP length - payload_length: the headers' length when they agree
    bit<16> handshake_bytes = 0;   // INITIAL: token + noise lengths
    bit<16> handshake_spare = 0;   // INITIAL: payload - token - noise; RETRY: payload - token (bit 15: negative)
    bool tng = false;

    /* Order comparisons as constant range tables (TCAM): a gateway compares a 16-bit field for equality, not order. */
    bit<1> udp_too_large = 0;
    bit<1> udp_too_short = 0;

    @hidden
    action udp_length_is(bit<1> too_large, bit<1> too_short) {
        udp_too_large = too_large;
        udp_too_short = too_short;
    }

    @hidden
    table udp_length_bounds {
        key = {
            hdr.udp.length: range;
        }
        actions = {
            udp_length_is;
        }
        const entries = {
            (UDP_HEADER_BYTES + TNG_MAX_PACKET_BYTES + 1) .. 0xffff: udp_length_is(1, 0);
            0 .. (UDP_HEADER_BYTES + TNG_FLOW_HEADER_BYTES - 1): udp_length_is(0, 1);
        }
        const default_action = udp_length_is(0, 0);
        size = 2;
    }

    /* The payload below each bound, one bit each: the bounds ascend (prefix 5 < tag 16 < section 19 + 24 < initial
     * 1200 - 24), so each range sets the bits of the bounds above it. */
    bit<4> payload_below = 0;

    @hidden
    action payload_is_below(bit<4> bounds) {
        payload_below = bounds;
    }

    @hidden
    table payload_bounds {
        key = {
            hdr.tng_flow.payload_length: range;
        }
        actions = {
            payload_is_below;
        }
        const entries = {
            0 .. (TNG_INITIAL_PREFIX_BYTES - 1): payload_is_below(15);
            TNG_INITIAL_PREFIX_BYTES .. (TNG_AEAD_TAG_BYTES - 1): payload_is_below(14);
            TNG_AEAD_TAG_BYTES .. (TNG_SECTION_PREFIX_BYTES + TNG_FLOW_HEADER_BYTES - 1): payload_is_below(12);
            (TNG_SECTION_PREFIX_BYTES + TNG_FLOW_HEADER_BYTES)
                .. (TNG_MIN_CLIENT_INITIAL_BYTES - TNG_FLOW_HEADER_BYTES - 1): payload_is_below(8);
        }
        const default_action = payload_is_below(0);
        size = 4;
    }

    /* INITIAL: fewer spare bytes than its prefix, or negative ones (the token and noise overrun the payload). */
    bit<1> spare_short = 0;

    @hidden
    action spare_is_short(bit<1> short) {
        spare_short = short;
    }

    @hidden
    table spare_bounds {
        key = {
            handshake_spare: range;
        }
        actions = {
            spare_is_short;
        }
        const entries = {
            0 .. (TNG_INITIAL_PREFIX_BYTES - 1): spare_is_short(1);
            0x8000 .. 0xffff: spare_is_short(1);
        }
        const default_action = spare_is_short(0);
        size = 2;
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
        udp_length_bounds.apply();
        payload_bounds.apply();
        if (tng) {
            if (udp_too_large == 1) {
                reason = DROP_TOO_LARGE;
            } else if (udp_too_short == 1) {
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
                spare_bounds.apply();
                if ((payload_below & PAYLOAD_BELOW_PREFIX) != 0 || spare_short == 1) {
                    reason = DROP_HANDSHAKE_LENGTH;
                } else if (hdr.tng_initial.stage < TNG_STAGE_CLIENT_HELLO
                           || hdr.tng_initial.stage > TNG_STAGE_CLIENT_FINISH) {
                    reason = DROP_BAD_STAGE;
                } else if (hdr.tng_initial.stage != TNG_STAGE_SERVER) {
                    if ((payload_below & PAYLOAD_BELOW_INITIAL) != 0) {
                        reason = DROP_INITIAL_TOO_SMALL;
                    }
                }
            } else if (hdr.tng_retry.isValid()) {
                take_retry_spare();
                if (handshake_spare != TNG_RETRY_PREFIX_BYTES) {
                    reason = DROP_HANDSHAKE_LENGTH;
                }
            } else if (hdr.tng_flow.packet_type == TNG_TYPE_SECTION) {
                if ((payload_below & PAYLOAD_BELOW_SECTION) != 0
                        || hdr.tng_section.section_version != TNG_SECTION_VERSION) {
                    reason = DROP_BAD_SECTION;
                }
            } else if (hdr.tng_flow.packet_type == TNG_TYPE_SECTION_ACK) {
                if (payload == 0) {
                    reason = DROP_BAD_SECTION;
                }
            } else if ((payload_below & PAYLOAD_BELOW_TAG) != 0) {
                reason = DROP_SHORT_SEALED_PAYLOAD;
            }
        }
        if (reason == DROP_REASON_NONE && ipv4_checksum_error) {
            reason = DROP_IPV4_CHECKSUM;
        }
    }
}

#endif  // TNG_TNA_DROP_REASON_P4
