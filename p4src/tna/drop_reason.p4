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

/* The bits of WireDropReason's payload_below: the tng payload is shorter than each of these bounds (EMPTY: than 1). */
#define PAYLOAD_BELOW_PREFIX 1
#define PAYLOAD_BELOW_TAG 2
#define PAYLOAD_BELOW_SECTION 4
#define PAYLOAD_BELOW_INITIAL 8
#define PAYLOAD_EMPTY 16

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

    /* The findings, one bit each (1: the rule fails), and what the rules ask of the packet. The rules table reads
     * the UDP ports and the checksum outcome itself. */
    bit<1> udp_too_large = 0;
    bit<1> udp_too_short = 0;
    bit<1> parser_partial = 0;
    bit<1> parser_failed = 0;
    bit<1> bad_version = 0;
    bit<1> reserved_flags = 0;
    bit<1> bad_section_version = 0;
    bit<1> length_mismatched = 0;
    bit<1> retry_mismatched = 0;
    bit<1> spare_short = 0;
    tng_kind_t kind = TNG_KIND_UNKNOWN;
    stage_kind_t stage = STAGE_KIND_UNKNOWN;

    /* Tables that find several things at once use one rule of ternary matching: with every combination of "equal"
     * (the expected value) and "any" listed from most to fewest "equal" columns, a packet's first match has "equal"
     * exactly where its fields are as expected, so each "any" column is a failed check. One table rather than one
     * condition per check: a Tofino stage has 16 logical tables, and each condition takes one. */
    @hidden
    action parser_found(bit<1> partial, bit<1> failed) {
        parser_partial = partial;
        parser_failed = failed;
    }

    @hidden
    table parser_findings {
        key = {
            parser_err: ternary;
        }
        actions = {
            parser_found;
        }
        const entries = {
            PARSER_ERROR_PARTIAL_HDR &&& PARSER_ERROR_PARTIAL_HDR: parser_found(1, 1);
            PARSER_ERROR_OK: parser_found(0, 0);
        }
        const default_action = parser_found(0, 1);
        size = 2;
    }

    @hidden
    action flow_found(bit<1> version, bit<1> flags, bit<1> section_version) {
        bad_version = version;
        reserved_flags = flags;
        bad_section_version = section_version;
    }

    @hidden
    table flow_findings {
        key = {
            hdr.tng_flow.version: ternary;
            hdr.tng_flow.flags: ternary;
            hdr.tng_section.section_version: ternary;
        }
        actions = {
            flow_found;
        }
        const entries = {
            (TNG_VERSION, 0 &&& TNG_FLAGS_RESERVED, TNG_SECTION_VERSION): flow_found(0, 0, 0);
            (TNG_VERSION, 0 &&& TNG_FLAGS_RESERVED, _): flow_found(0, 0, 1);
            (TNG_VERSION, _, TNG_SECTION_VERSION): flow_found(0, 1, 0);
            (_, 0 &&& TNG_FLAGS_RESERVED, TNG_SECTION_VERSION): flow_found(1, 0, 0);
            (TNG_VERSION, _, _): flow_found(0, 1, 1);
            (_, 0 &&& TNG_FLAGS_RESERVED, _): flow_found(1, 0, 1);
            (_, _, TNG_SECTION_VERSION): flow_found(1, 1, 0);
        }
        const default_action = flow_found(1, 1, 1);
        size = 7;
    }

    /* The UDP length less the payload length must be the headers' length; a RETRY's payload less its token, the
     * RETRY prefix. */
    @hidden
    action lengths_found(bit<1> mismatched, bit<1> retry) {
        length_mismatched = mismatched;
        retry_mismatched = retry;
    }

    @hidden
    table length_findings {
        key = {
            length_mismatch: ternary;
            retry_spare: ternary;
        }
        actions = {
            lengths_found;
        }
        const entries = {
            (UDP_HEADER_BYTES + TNG_FLOW_HEADER_BYTES, TNG_RETRY_PREFIX_BYTES): lengths_found(0, 0);
            (UDP_HEADER_BYTES + TNG_FLOW_HEADER_BYTES, _): lengths_found(0, 1);
            (_, TNG_RETRY_PREFIX_BYTES): lengths_found(1, 0);
        }
        const default_action = lengths_found(1, 1);
        size = 3;
    }

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

    /* The payload below each bound, one bit each: the bounds ascend (empty 1 < prefix 5 < tag 16 < section 19 + 24 <
     * initial 1200 - 24), so each range sets the bits of the bounds above it. */
    bit<5> payload_below = 0;

    @hidden
    action payload_is_below(bit<5> bounds) {
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
            0 .. 0: payload_is_below(31);
            1 .. (TNG_INITIAL_PREFIX_BYTES - 1): payload_is_below(15);
            TNG_INITIAL_PREFIX_BYTES .. (TNG_AEAD_TAG_BYTES - 1): payload_is_below(14);
            TNG_AEAD_TAG_BYTES .. (TNG_SECTION_PREFIX_BYTES + TNG_FLOW_HEADER_BYTES - 1): payload_is_below(12);
            (TNG_SECTION_PREFIX_BYTES + TNG_FLOW_HEADER_BYTES)
                .. (TNG_MIN_CLIENT_INITIAL_BYTES - TNG_FLOW_HEADER_BYTES - 1): payload_is_below(8);
        }
        const default_action = payload_is_below(0);
        size = 5;
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
    action take_differences() {
        length_mismatch = hdr.udp.length - hdr.tng_flow.payload_length;
        handshake_bytes = hdr.tng_initial.token_length + hdr.tng_initial.noise_length;
        retry_spare = hdr.tng_flow.payload_length - hdr.tng_retry.token_length;
    }

    @hidden
    action take_initial_spare() {
        initial_spare = hdr.tng_flow.payload_length - handshake_bytes;
    }

    @hidden
    action drop_for(drop_reason_t rule) {
        reason = rule;
    }

    /* The rules in wire-format section 8's order (entry order is priority: the first failing rule names the
     * reason). Each finding column is 1 where its rule fails; the other columns say which packets a rule is for. */
    @hidden
    table rules {
        key = {
            hdr.udp.isValid(): ternary;
            hdr.udp.dst_port: ternary;
            hdr.udp.src_port: ternary;
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
            ipv4_checksum_error: ternary;
        }
        actions = {
            drop_for;
        }
        /* UDP, destination port, source port, too large, too short, partial, failed, flow, version, kind, flags,
         * mismatch, below, spare, stage, retry, section version, checksum */
        const entries = {
            (true, TNG_UDP_PORT, _, 1, _, _, _, _, _, _, _, _, _, _, _, _, _, _): drop_for(DROP_TOO_LARGE);
            (true, _, TNG_UDP_PORT, 1, _, _, _, _, _, _, _, _, _, _, _, _, _, _): drop_for(DROP_TOO_LARGE);
            (true, TNG_UDP_PORT, _, _, 1, _, _, _, _, _, _, _, _, _, _, _, _, _): drop_for(DROP_TRUNCATED_HEADER);
            (true, _, TNG_UDP_PORT, _, 1, _, _, _, _, _, _, _, _, _, _, _, _, _): drop_for(DROP_TRUNCATED_HEADER);
            (_, _, _, _, _, 1, _, _, _, _, _, _, _, _, _, _, _, _): drop_for(DROP_PACKET_TOO_SHORT);
            (_, _, _, _, _, _, 1, _, _, _, _, _, _, _, _, _, _, _): drop_for(DROP_OTHER_PARSER_ERROR);
            (_, _, _, _, _, _, _, true, 1, _, _, _, _, _, _, _, _, _): drop_for(DROP_BAD_VERSION);
            (_, _, _, _, _, _, _, true, _, TNG_KIND_UNKNOWN, _, _, _, _, _, _, _, _): drop_for(DROP_UNKNOWN_TYPE);
            (_, _, _, _, _, _, _, true, _, _, 1, _, _, _, _, _, _, _): drop_for(DROP_RESERVED_FLAGS);
            (_, _, _, _, _, _, _, true, _, _, _, 1, _, _, _, _, _, _): drop_for(DROP_LENGTH_MISMATCH);
            (_, _, _, _, _, _, _, true, _, TNG_KIND_INITIAL, _, _, PAYLOAD_BELOW_PREFIX &&& PAYLOAD_BELOW_PREFIX, _, _,
             _, _, _): drop_for(DROP_HANDSHAKE_LENGTH);
            (_, _, _, _, _, _, _, true, _, TNG_KIND_INITIAL, _, _, _, 1, _, _, _, _): drop_for(DROP_HANDSHAKE_LENGTH);
            (_, _, _, _, _, _, _, true, _, TNG_KIND_INITIAL, _, _, _, _, STAGE_KIND_UNKNOWN, _, _, _):
                drop_for(DROP_BAD_STAGE);
            (_, _, _, _, _, _, _, true, _, TNG_KIND_INITIAL, _, _, PAYLOAD_BELOW_INITIAL &&& PAYLOAD_BELOW_INITIAL, _,
             STAGE_KIND_CLIENT, _, _, _): drop_for(DROP_INITIAL_TOO_SMALL);
            (_, _, _, _, _, _, _, true, _, TNG_KIND_RETRY, _, _, _, _, _, 1, _, _): drop_for(DROP_HANDSHAKE_LENGTH);
            (_, _, _, _, _, _, _, true, _, TNG_KIND_SECTION, _, _, PAYLOAD_BELOW_SECTION &&& PAYLOAD_BELOW_SECTION, _,
             _, _, _, _): drop_for(DROP_BAD_SECTION);
            (_, _, _, _, _, _, _, true, _, TNG_KIND_SECTION, _, _, _, _, _, _, 1, _): drop_for(DROP_BAD_SECTION);
            (_, _, _, _, _, _, _, true, _, TNG_KIND_SECTION_ACK, _, _, PAYLOAD_EMPTY &&& PAYLOAD_EMPTY, _, _, _, _, _):
                drop_for(DROP_BAD_SECTION);
            (_, _, _, _, _, _, _, true, _, TNG_KIND_SEALED, _, _, PAYLOAD_BELOW_TAG &&& PAYLOAD_BELOW_TAG, _, _, _, _,
             _): drop_for(DROP_SHORT_SEALED_PAYLOAD);
            (_, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, true): drop_for(DROP_IPV4_CHECKSUM);
        }
        const default_action = drop_for(DROP_REASON_NONE);
        size = 20;
    }

    apply {
        /* Findings side by side: none reads another's result but the INITIAL's spare bytes (a difference of a
         * difference), so they take the first stages together. */
        parser_findings.apply();
        flow_findings.apply();
        udp_length_bounds.apply();
        payload_bounds.apply();
        packet_kinds.apply();
        initial_stages.apply();
        take_differences();
        length_findings.apply();
        take_initial_spare();
        spare_bounds.apply();
        rules.apply();
    }
}

#endif  // TNG_TNA_DROP_REASON_P4
