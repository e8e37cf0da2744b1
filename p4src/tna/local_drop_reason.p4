/*
 * TNA: the drop rules of v1model/tng.p4's ingress that follow the wire checks, in its order: no IPv4 header (no
 * route), lengths (IPv4 total length covering its header, TCP data offset and UDP length within it), helper frames
 * that are not the helper's confirmations of copies, then forwarding's verdict (no route, TTL expired). A packet-out
 * sent to a port skips them all. As in WireDropReason, the findings are computed side by side and one ternary table
 * takes the first rule that fails; its result is the packet's reason, the wire checks' when one of them failed.
 * Unlike v1model, the IPv4 total length is not checked against the frame: Tofino's ingress does not know the
 * packet's length.
 */
#ifndef TNG_TNA_LOCAL_DROP_REASON_P4
#define TNG_TNA_LOCAL_DROP_REASON_P4

#include <core.p4>
#include <tna.p4>

#include "shared/define.p4"
#include "shared/pipeline_header.p4"

control LocalDropReason(in tng_headers_t hdr,
                        in drop_reason_t wire_reason,
                        in bool sent_out,
                        in bool injected,
                        in drop_reason_t forwarding_reason,
                        out drop_reason_t reason,
                        out bit<16> tcp_payload_bytes) {
    /* Header lengths come from constant tables rather than shifts of the 4-bit length fields (an operation on them
     * asks their containers for an alignment the deparsed headers cannot give); each difference is an action of its
     * own (a Tofino action runs in one stage, one operation per field), and its sign (bit 15, for lengths below
     * 32 KiB) is the finding. */
    bit<16> ip_header_bytes = 0;
    bit<16> tcp_header_bytes = 0;
    bit<16> l4_bytes = 0;
    bit<16> udp_spare_bytes = 0;
    bit<1> tcp_offset_short = 0;
    bit<1> udp_length_short = 0;

    @hidden
    action ipv4_header_bytes(bit<16> bytes) {
        ip_header_bytes = bytes;
    }

    @hidden
    table ipv4_header_length {
        key = {
            hdr.wire.ipv4.ihl: exact;
        }
        actions = {
            ipv4_header_bytes;
        }
        const entries = {
            0: ipv4_header_bytes(0);
            1: ipv4_header_bytes(4);
            2: ipv4_header_bytes(8);
            3: ipv4_header_bytes(12);
            4: ipv4_header_bytes(16);
            5: ipv4_header_bytes(20);
            6: ipv4_header_bytes(24);
            7: ipv4_header_bytes(28);
            8: ipv4_header_bytes(32);
            9: ipv4_header_bytes(36);
            10: ipv4_header_bytes(40);
            11: ipv4_header_bytes(44);
            12: ipv4_header_bytes(48);
            13: ipv4_header_bytes(52);
            14: ipv4_header_bytes(56);
            15: ipv4_header_bytes(60);
        }
        size = 16;
    }

    /* The TCP header's length, and whether the data offset is below the header's minimum (5 words). */
    @hidden
    action tcp_header_is(bit<16> bytes, bit<1> short) {
        tcp_header_bytes = bytes;
        tcp_offset_short = short;
    }

    @hidden
    table tcp_header_length {
        key = {
            hdr.wire.tcp.data_offset: exact;
        }
        actions = {
            tcp_header_is;
        }
        const entries = {
            0: tcp_header_is(0, 1);
            1: tcp_header_is(4, 1);
            2: tcp_header_is(8, 1);
            3: tcp_header_is(12, 1);
            4: tcp_header_is(16, 1);
            5: tcp_header_is(20, 0);
            6: tcp_header_is(24, 0);
            7: tcp_header_is(28, 0);
            8: tcp_header_is(32, 0);
            9: tcp_header_is(36, 0);
            10: tcp_header_is(40, 0);
            11: tcp_header_is(44, 0);
            12: tcp_header_is(48, 0);
            13: tcp_header_is(52, 0);
            14: tcp_header_is(56, 0);
            15: tcp_header_is(60, 0);
        }
        size = 16;
    }

    @hidden
    action udp_length_is_short(bit<1> short) {
        udp_length_short = short;
    }

    @hidden
    table udp_header_bound {
        key = {
            hdr.wire.udp.length: range;
        }
        actions = {
            udp_length_is_short;
        }
        const entries = {
            0 .. (UDP_HEADER_BYTES - 1): udp_length_is_short(1);
        }
        const default_action = udp_length_is_short(0);
        size = 1;
    }

    @hidden
    action take_l4_length() {
        l4_bytes = hdr.wire.ipv4.total_len - ip_header_bytes;
    }

    @hidden
    action take_l4_spares() {
        tcp_payload_bytes = l4_bytes - tcp_header_bytes;
        udp_spare_bytes = l4_bytes - hdr.wire.udp.length;
    }

    @hidden
    action drop_for(drop_reason_t rule) {
        reason = rule;
    }

    @hidden
    action keep_wire_reason() {
        reason = wire_reason;
    }

    /* The packet's reason: the wire checks' if one failed, else the first of these rules that fails (entry order is
     * priority; every rule is for packets that passed the wire checks and were not sent out by a packet-out). A
     * helper frame is taken only as the helper's confirmation of copies (from the helper, reason "copies held",
     * carrying the TCP segment), which VISIBLE drops. */
    @hidden
    table rules {
        key = {
            wire_reason: ternary;
            sent_out: ternary;
            hdr.wire.ipv4.isValid(): ternary;
            l4_bytes[15:15]: ternary;
            hdr.wire.tcp.isValid(): ternary;
            tcp_offset_short: ternary;
            tcp_payload_bytes[15:15]: ternary;
            hdr.wire.udp.isValid(): ternary;
            udp_length_short: ternary;
            udp_spare_bytes[15:15]: ternary;
            hdr.helper.isValid(): ternary;
            injected: ternary;
            hdr.helper.reason: ternary;
            forwarding_reason: ternary;
        }
        actions = {
            drop_for;
            keep_wire_reason;
        }
        /* wire, sent out, IPv4, IPv4 short, TCP, offset short, TCP short, UDP, UDP length short, UDP beyond, helper,
         * injected, helper reason, forwarding */
        const entries = {
            (DROP_REASON_NONE, false, false, _, _, _, _, _, _, _, _, _, _, _): drop_for(DROP_NO_ROUTE);
            (DROP_REASON_NONE, false, true, 1, _, _, _, _, _, _, _, _, _, _): drop_for(DROP_BAD_LENGTH);
            (DROP_REASON_NONE, false, true, _, true, 1, _, _, _, _, _, _, _, _): drop_for(DROP_BAD_LENGTH);
            (DROP_REASON_NONE, false, true, _, true, _, 1, _, _, _, _, _, _, _): drop_for(DROP_BAD_LENGTH);
            (DROP_REASON_NONE, false, true, _, false, _, _, true, 1, _, _, _, _, _): drop_for(DROP_BAD_LENGTH);
            (DROP_REASON_NONE, false, true, _, false, _, _, true, _, 1, _, _, _, _): drop_for(DROP_BAD_LENGTH);
            (DROP_REASON_NONE, false, _, _, _, _, _, _, _, _, true, false, _, _): drop_for(DROP_HELPER_FRAME);
            (DROP_REASON_NONE, false, _, _, false, _, _, _, _, _, true, _, _, _): drop_for(DROP_HELPER_FRAME);
            (DROP_REASON_NONE, false, _, _, _, _, _, _, _, _, true, _, HELPER_COPIES_HELD, _):
                drop_for(DROP_REASON_NONE);
            (DROP_REASON_NONE, false, _, _, _, _, _, _, _, _, true, _, _, _): drop_for(DROP_HELPER_FRAME);
            (DROP_REASON_NONE, false, _, _, _, _, _, _, _, _, false, _, _, DROP_NO_ROUTE): drop_for(DROP_NO_ROUTE);
            (DROP_REASON_NONE, false, _, _, _, _, _, _, _, _, false, _, _, DROP_TTL_EXPIRED):
                drop_for(DROP_TTL_EXPIRED);
        }
        const default_action = keep_wire_reason();
        size = 12;
    }

    apply {
        ipv4_header_length.apply();
        tcp_header_length.apply();
        udp_header_bound.apply();
        take_l4_length();
        take_l4_spares();
        rules.apply();
    }
}

#endif  // TNG_TNA_LOCAL_DROP_REASON_P4
