/*
 * TNA: the wire checks of v1model/parser.p4 and v1model/drop_reason.p4 over the extracted fields (Tofino's parser
 * cannot raise custom errors), with the packet's first failing rule in wire-format section 8's order as its reason, so
 * that a packet gets the same reason as on v1model; a frame that ends inside a header the parser needed is
 * PACKET_TOO_SHORT unless an earlier length rule already names its fault (on v1model those rules run before the short
 * header is extracted).
 * v1model's parser stops at the first failing rule; here every rule is a one-bit finding computed side by side (each
 * `if` on an earlier result would cost a pipeline stage), and one ternary table whose entries are the rules in order
 * turns the findings into the reason: the first entry that matches is the first rule that fails.
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

/* What the packet type asks of the rest of the packet. */
typedef bit<3> tng_kind_t;
const tng_kind_t TNG_KIND_UNKNOWN = 0;
const tng_kind_t TNG_KIND_INITIAL = 1;
const tng_kind_t TNG_KIND_RETRY = 2;
const tng_kind_t TNG_KIND_SECTION = 3;
const tng_kind_t TNG_KIND_SECTION_ACK = 4;
const tng_kind_t TNG_KIND_SEALED = 5;  // data, ACK, probe, close: an AEAD-sealed payload

/* An INITIAL's handshake stage. */
typedef bit<2> stage_kind_t;
const stage_kind_t STAGE_KIND_UNKNOWN = 0;
const stage_kind_t STAGE_KIND_CLIENT = 1;
const stage_kind_t STAGE_KIND_SERVER = 2;

control WireDropReason(in headers_t hdr, in bit<16> parser_err, in bool ipv4_checksum_error,
                       out drop_reason_t reason) {
    /* Tofino's gateways compare a field with a constant: a comparison of two fields becomes their difference,
     * computed by an action of its own (one operation per field per action), an order comparison a range table. */
    bit<16> length_mismatch = 0;   // UDP length - payload_length: the headers' length when they agree
    bit<16> handshake_bytes = 0;   // INITIAL: token + noise lengths
    bit<16> initial_spare = 0;     // INITIAL: payload - token - noise (bit 15: negative)
    bit<16> retry_spare = 0;       // RETRY: payload - token

    /* The findings, one bit each (1: the rule fails), and what the rules ask of the packet. */
    bit<1> tng = 0;
    bit<1> udp_too_large = 0;
    bit<1> udp_too_short = 0;
    bit<1> parser_partial = 0;
    bit<1> parser_failed = 0;
    bit<1> bad_version = 0;
    bit<1> reserved_flags = 0;
    bit<1> length_mismatched = 0;
    bit<1> spare_short = 0;
    bit<1> retry_mismatched = 0;
    bit<1> bad_section_version = 0;
    bit<1> payload_empty = 0;
    bit<1> checksum_failed = 0;
    tng_kind_t kind = TNG_KIND_UNKNOWN;
    stage_kind_t stage = STAGE_KIND_UNKNOWN;

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

    @hidden
    action kind_is(tng_kind_t packet_kind) {
        kind = packet_kind;
    }

    @hidden
    table packet_kinds {
        key = {
            hdr.tng_flow.packet_type: exact;
        }
        actions = {
            kind_is;
        }
        const entries = {
            TNG_TYPE_INITIAL: kind_is(TNG_KIND_INITIAL);
            TNG_TYPE_RETRY: kind_is(TNG_KIND_RETRY);
            TNG_TYPE_DATA: kind_is(TNG_KIND_SEALED);
            TNG_TYPE_ACK: kind_is(TNG_KIND_SEALED);
            TNG_TYPE_PROBE: kind_is(TNG_KIND_SEALED);
            TNG_TYPE_CLOSE: kind_is(TNG_KIND_SEALED);
            TNG_TYPE_SECTION: kind_is(TNG_KIND_SECTION);
            TNG_TYPE_SECTION_ACK: kind_is(TNG_KIND_SECTION_ACK);
        }
        const default_action = kind_is(TNG_KIND_UNKNOWN);
        size = 8;
    }

    @hidden
    action stage_is(stage_kind_t stage_kind) {
        stage = stage_kind;
    }

    @hidden
    table initial_stages {
        key = {
            hdr.tng_initial.stage: exact;
        }
        actions = {
            stage_is;
        }
        const entries = {
            TNG_STAGE_CLIENT_HELLO: stage_is(STAGE_KIND_CLIENT);
            TNG_STAGE_SERVER: stage_is(STAGE_KIND_SERVER);
            TNG_STAGE_CLIENT_FINISH: stage_is(STAGE_KIND_CLIENT);
        }
        const default_action = stage_is(STAGE_KIND_UNKNOWN);
        size = 3;
    }

    /* INITIAL: fewer spare bytes than its prefix, or negative ones (the token and noise overrun the payload). */
    @hidden
    action spare_is_short(bit<1> short) {
        spare_short = short;
    }

    @hidden
    table spare_bounds {
        key = {
            initial_spare: range;
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
        initial_spare = hdr.tng_flow.payload_length - handshake_bytes;
    }

    @hidden
    action take_retry_spare() {
        retry_spare = hdr.tng_flow.payload_length - hdr.tng_retry.token_length;
    }

    @hidden
    action drop_for(drop_reason_t rule) {
        reason = rule;
    }

    /* The rules in wire-format section 8's order (entry order is priority: the first failing rule names the
     * reason). Each finding column is 1 where its rule fails; the validity columns say which headers a rule reads. */
    @hidden
    table rules {
        key = {
            tng: ternary;
            udp_too_large: ternary;
            udp_too_short: ternary;
            parser_partial: ternary;
            parser_failed: ternary;
            hdr.tng_flow.isValid(): ternary;
            bad_version: ternary;
            kind: ternary;
            reserved_flags: ternary;
            length_mismatched: ternary;
            payload_below: ternary;
            spare_short: ternary;
            stage: ternary;
            retry_mismatched: ternary;
            bad_section_version: ternary;
            payload_empty: ternary;
            checksum_failed: ternary;
        }
        actions = {
            drop_for;
        }
        /* tng, too large, too short, partial, failed, flow, version, kind, flags, mismatch, below, spare, stage,
         * retry, section version, empty, checksum */
        const entries = {
            (1, 1, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _): drop_for(DROP_TOO_LARGE);
            (1, _, 1, _, _, _, _, _, _, _, _, _, _, _, _, _, _): drop_for(DROP_TRUNCATED_HEADER);
            (_, _, _, 1, _, _, _, _, _, _, _, _, _, _, _, _, _): drop_for(DROP_PACKET_TOO_SHORT);
            (_, _, _, _, 1, _, _, _, _, _, _, _, _, _, _, _, _): drop_for(DROP_OTHER_PARSER_ERROR);
            (_, _, _, _, _, true, 1, _, _, _, _, _, _, _, _, _, _): drop_for(DROP_BAD_VERSION);
            (_, _, _, _, _, true, _, TNG_KIND_UNKNOWN, _, _, _, _, _, _, _, _, _): drop_for(DROP_UNKNOWN_TYPE);
            (_, _, _, _, _, true, _, _, 1, _, _, _, _, _, _, _, _): drop_for(DROP_RESERVED_FLAGS);
            (_, _, _, _, _, true, _, _, _, 1, _, _, _, _, _, _, _): drop_for(DROP_LENGTH_MISMATCH);
            (_, _, _, _, _, true, _, TNG_KIND_INITIAL, _, _, PAYLOAD_BELOW_PREFIX &&& PAYLOAD_BELOW_PREFIX, _, _, _, _,
             _, _): drop_for(DROP_HANDSHAKE_LENGTH);
            (_, _, _, _, _, true, _, TNG_KIND_INITIAL, _, _, _, 1, _, _, _, _, _): drop_for(DROP_HANDSHAKE_LENGTH);
            (_, _, _, _, _, true, _, TNG_KIND_INITIAL, _, _, _, _, STAGE_KIND_UNKNOWN, _, _, _, _):
                drop_for(DROP_BAD_STAGE);
            (_, _, _, _, _, true, _, TNG_KIND_INITIAL, _, _, PAYLOAD_BELOW_INITIAL &&& PAYLOAD_BELOW_INITIAL, _,
             STAGE_KIND_CLIENT, _, _, _, _): drop_for(DROP_INITIAL_TOO_SMALL);
            (_, _, _, _, _, true, _, TNG_KIND_RETRY, _, _, _, _, _, 1, _, _, _): drop_for(DROP_HANDSHAKE_LENGTH);
            (_, _, _, _, _, true, _, TNG_KIND_SECTION, _, _, PAYLOAD_BELOW_SECTION &&& PAYLOAD_BELOW_SECTION, _, _, _,
             _, _, _): drop_for(DROP_BAD_SECTION);
            (_, _, _, _, _, true, _, TNG_KIND_SECTION, _, _, _, _, _, _, 1, _, _): drop_for(DROP_BAD_SECTION);
            (_, _, _, _, _, true, _, TNG_KIND_SECTION_ACK, _, _, _, _, _, _, _, 1, _): drop_for(DROP_BAD_SECTION);
            (_, _, _, _, _, true, _, TNG_KIND_SEALED, _, _, PAYLOAD_BELOW_TAG &&& PAYLOAD_BELOW_TAG, _, _, _, _, _,
             _): drop_for(DROP_SHORT_SEALED_PAYLOAD);
            (_, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, 1): drop_for(DROP_IPV4_CHECKSUM);
        }
        const default_action = drop_for(DROP_REASON_NONE);
        size = 18;
    }

    apply {
        /* Findings side by side: none reads another's result, so they share the first stages. */
        if (hdr.udp.isValid() && hdr.udp.dst_port == TNG_UDP_PORT) {
            tng = 1;
        }
        if (hdr.udp.isValid() && hdr.udp.src_port == TNG_UDP_PORT) {
            tng = 1;
        }
        if ((parser_err & PARSER_ERROR_PARTIAL_HDR) != 0) {
            parser_partial = 1;
        }
        if (parser_err != PARSER_ERROR_OK) {
            parser_failed = 1;
        }
        if (hdr.tng_flow.version != TNG_VERSION) {
            bad_version = 1;
        }
        if ((hdr.tng_flow.flags & TNG_FLAGS_RESERVED) != 0) {
            reserved_flags = 1;
        }
        if (hdr.tng_section.section_version != TNG_SECTION_VERSION) {
            bad_section_version = 1;
        }
        if (hdr.tng_flow.payload_length == 0) {
            payload_empty = 1;
        }
        if (ipv4_checksum_error) {
            checksum_failed = 1;
        }
        udp_length_bounds.apply();
        payload_bounds.apply();
        packet_kinds.apply();
        initial_stages.apply();
        take_length_mismatch();
        take_handshake_bytes();
        take_retry_spare();
        take_initial_spare();
        spare_bounds.apply();
        if (length_mismatch != UDP_HEADER_BYTES + TNG_FLOW_HEADER_BYTES) {
            length_mismatched = 1;
        }
        if (retry_spare != TNG_RETRY_PREFIX_BYTES) {
            retry_mismatched = 1;
        }
        rules.apply();
    }
}

#endif  // TNG_TNA_DROP_REASON_P4
