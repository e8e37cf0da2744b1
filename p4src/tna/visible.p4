/*
 * TNA: VISIBLE on the TCP ACKs of steered downlink flows, v1model/visible.p4's state machine restructured for
 * Tofino 1 (it runs in egress, tna/tng.p4, where the packet's ingress verdict is known). A stateful ALU runs one
 * action per register and packet, in the register's stage, on a cell of at most two 32-bit halves, with at most two
 * comparisons and two 32-bit PHV inputs over all its actions; a stage holds four registers and 16 logical tables,
 * shared by both gresses. So the per-flow state is twelve registers, each fed by the ones before it, and each
 * register is used by exactly one table (tna/visible_flow_state.p4, tna/visible_ack_state.p4), whose constant
 * entries choose the register's action from the packet's kind and the earlier registers' verdicts (a register
 * action's predicate, one bit of four). Stages as compiled (egress):
 *
 *    0  params, helper, packet_kind      the policy, the helper's epoch, what the packet is
 *    1  packet_plan, segment_bounds      copy and boost flags; a segment's end, an ACK's lowest SACK edge, D-SACK
 *    1  flow_owner     {key, last_seen}   claim (downlink), touch (uplink), check (confirmation) the cell
 *    2  forwarded_end  {end, cap}         v1model's forwarded_end; an ACK's cap: min(end, lowest SACK left edge)
 *    2  forwarded_max                     v1model's forwarded_max; an ACK learns whether data is outstanding
 *    2  ack_window     {window, seen}     the last ACK's window (v1model's receiver_window and ack_seen)
 *    2  receiver_ack                      an ACK is the same, newer or other; a confirmation starts within it?
 *    3  copy_state     {epoch, start}     starts copies in the helper's epoch; the ACK is covered by copies?
 *    3  burst          {dup_acks, -}      counts a dup-ACK, says whether it may be held or boosted
 *    4  confirmed_end  {end, cap}         the helper confirmed copies up to here; a dup-ACK's cap: min(end, cap)
 *    4  reported_ack                      reports the receiver's ACK every report_bytes
 *    5  sent_ack                          boosts a dup-ACK; a new ACK finds owed bytes
 *    6  hold_since                        holds a dup-ACK within the budget; a new ACK hides SACK blocks
 *    7  retransmits                       retransmission requests of the burst
 *    8  outcome                           the decision: rewrite, drop, copy to the helper; its count
 *
 * What this gives up or approximates against v1model (docs/tofino.md):
 * - no queue-depth guard on boosts, no queue term in the hold budget (boost_max_depth and queue_aware_hold are
 *   ignored): the queue they would read is the downlink port's, and an ACK is in the uplink port's egress;
 * - a boost adds VISIBLE_TNA_BOOST_BYTES per dup-ACK (segment_size ignored; no multiplier), up to the same caps
 *   (forwarded_end, confirmed_end, SACK left edges), the lowest SACK left edge taken against forwarded_end before
 *   the ACK caught it up;
 * - no EWMA of burst lengths: dup-ACKs are held while at most hold_slack (alpha_shift, beta_shift ignored);
 * - a cell is taken over after VISIBLE_TNA_IDLE_TIMEOUT (idle_timeout_us ignored: flow_owner's two inputs are the
 *   key and now), a never-used cell also counts as idle only then, and the key is a symmetric CRC-32;
 * - the hold clock runs from the burst's first hold or last boost to now (v1model: to the previous hold);
 * - ack_window keeps every ACK's window, also of ACKs older than the receiver's (v1model: same or newer only);
 *   the first ACK becomes the receiver's ACK only if above the claiming segment's sequence number;
 * - owed bytes are requested on the new ACK that finds them, not again on dup-ACKs every budget nor when a
 *   dup-ACK finds a stalled sender; requests of a burst (or owed bytes) do not stop its boosts and holds;
 * - an owed request does not move reported_ack; parameters of an uplink ACK come from its own policy (md.policy).
 * Times are in units of 256 ns ("us" in parameter names), compared modulo 2^32.
 */
#ifndef TNG_TNA_VISIBLE_P4
#define TNG_TNA_VISIBLE_P4

#include <core.p4>
#include <tna.p4>

#include "shared/pipeline_header.p4"
#include "tna/visible_ack_state.p4"
#include "tna/visible_define.p4"
#include "tna/visible_flow_state.p4"

control Visible(inout tng_headers_t hdr,
                inout tng_metadata_t md,
                in port_num_t ingress_port,
                inout egress_intrinsic_metadata_for_deparser_t dprsr_md,
                in bit<32> now,
                out bool tcp_rewritten,
                inout helper_mirror_t mirror,
                inout MirrorId_t session) {
    Counter<bit<64>, bit<8>>(VISIBLE_DECISION_COUNT, CounterType_t.PACKETS) decisions;
    /* Direction-symmetric: both directions of a connection get the same key (egress's PHV field names). */
    @symmetric("hdr.tng.wire.ipv4.src_addr", "hdr.tng.wire.ipv4.dst_addr")
    @symmetric("hdr.tng.wire.tcp.src_port", "hdr.tng.wire.tcp.dst_port")
    Hash<bit<32>>(HashAlgorithm_t.CRC32) key_hash;
    VisibleFlowState() flow_state;
    VisibleAckState() ack_state;

    visible_flow_t flow;

    action visible_on(bit<16> segment_size, bit<32> hold_budget_us, bit<16> hold_slack, bit<32> boost_max_depth,
                      bit<16> boost_max, bit<8> retransmit_max, bit<8> alpha_shift, bit<8> beta_shift,
                      bit<32> idle_timeout_us, bit<32> report_bytes, bit<1> queue_aware_hold) {
        flow.enabled = 1;
        flow.hold_budget = hold_budget_us;
        flow.slack = (bit<32>)hold_slack;
        flow.boosts_max = (bit<32>)boost_max;
        flow.requests_max = retransmit_max;
        flow.report_every = report_bytes;
    }

    table params {
        key = {
            md.policy: exact @name("policy");
        }
        actions = {
            visible_on;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = POLICY_COUNT;
    }

    action helper_up(bit<16> epoch) {
        flow.helper_ok = 1;
        flow.helper_epoch = epoch;
    }

    action helper_down() {
        flow.helper_ok = 0;
    }

    table helper {
        actions = {
            helper_up;
            helper_down;
        }
        default_action = helper_down();
    }

    /* v1model: clone_preserving_field_list to HELPER_CLONE_SESSION; here the egress deparser mirrors. */
    @hidden
    action to_helper(helper_reason_t reason) {
        mirror.setValid();
        mirror.kind = BRIDGE_KIND_HELPER_COPY;
        mirror.reason = reason;
        mirror._pad = 0;
        mirror.ingress_port = ingress_port;
        session = (MirrorId_t)HELPER_CLONE_SESSION;
        dprsr_md.mirror_type = MIRROR_TYPE_HELPER;
    }

    /* The SACK option (kind, length, blocks) becomes NOPs; the deparser recomputes the TCP checksum. */
    @hidden
    action sack_to_nops() {
        hdr.tcp_sack.kind = TCP_OPTION_NOP;
        hdr.tcp_sack.length = TCP_OPTION_NOP;
        hdr.sack_blocks[0].left_edge = TCP_OPTION_NOP_X4;
        hdr.sack_blocks[0].right_edge = TCP_OPTION_NOP_X4;
        hdr.sack_blocks[1].left_edge = TCP_OPTION_NOP_X4;
        hdr.sack_blocks[1].right_edge = TCP_OPTION_NOP_X4;
        hdr.sack_blocks[2].left_edge = TCP_OPTION_NOP_X4;
        hdr.sack_blocks[2].right_edge = TCP_OPTION_NOP_X4;
    }

    /* The differences whose signs order the SACK edges (table segment_bounds matches on the signs). */
    bit<32> d01;
    bit<32> d02;
    bit<32> d12;
    bit<32> below_ack;
    bit<32> right_inside;

    @hidden
    action sack_differences() {
        d01 = hdr.sack_blocks[0].left_edge - hdr.sack_blocks[1].left_edge;
        d02 = hdr.sack_blocks[0].left_edge - hdr.sack_blocks[2].left_edge;
        d12 = hdr.sack_blocks[1].left_edge - hdr.sack_blocks[2].left_edge;
        below_ack = hdr.sack_blocks[0].left_edge - hdr.wire.tcp.ack_no;
        right_inside = hdr.sack_blocks[1].right_edge - hdr.sack_blocks[0].right_edge;
    }

    /* Hold budget, dup-ACK limits and report point as the stateful ALUs compare them. */
    @hidden
    action take_limits() {
        flow.hold_stale = now - flow.hold_budget;
        flow.report_below = hdr.wire.tcp.ack_no - flow.report_every;
        flow.slack_dups = flow.slack << VISIBLE_EWMA_FRACTION_BITS;
        flow.boost_dups = flow.boosts_max << VISIBLE_EWMA_FRACTION_BITS;
    }

    /* What the packet is, and the registers' inputs that need only the packet. */
    @hidden
    action take_confirmation() {
        flow.kind = KIND_CONFIRMATION;
        flow.in_a = hdr.wire.tcp.seq_no;
        flow.in_c = hdr.wire.tcp.ack_no;
    }

    /* seg_end (in_b) = seq + length, the length (payload + SYN + FIN) added here and seq in segment_bounds: an
     * action adds once. */
    @hidden
    action take_data(bit<32> syn_fin) {
        flow.kind = KIND_DATA;
        flow.in_a = hdr.wire.tcp.seq_no;
        flow.length = (bit<32>)md.tcp_payload_bytes + syn_fin;
    }

    @hidden
    action take_ack() {
        flow.kind = KIND_ACK;
        flow.in_a = hdr.wire.tcp.ack_no;
        flow.in_c = hdr.wire.tcp.ack_no;
    }

    /* v1model's branches: a helper frame, a downlink segment of an LWIP route (any role), or an ACK coming up from the
     * LTE or Wi-Fi side; VISIBLE on in the policy is checked by owner_step. */
    @hidden
    table packet_kind {
        key = {
            hdr.helper.isValid(): ternary;
            md.lwip: ternary;
            md.injected: ternary;
            md.role: ternary;
            hdr.wire.tcp.flags: ternary;
        }
        actions = {
            take_confirmation;
            take_data;
            take_ack;
            @defaultonly NoAction;
        }
        const entries = {
            (true, _, _, _, _): take_confirmation();
            (false, true, false, _, (TCP_FLAG_SYN | TCP_FLAG_FIN) &&& (TCP_FLAG_SYN | TCP_FLAG_FIN)): take_data(2);
            (false, true, false, _, TCP_FLAG_SYN &&& TCP_FLAG_SYN): take_data(1);
            (false, true, false, _, TCP_FLAG_FIN &&& TCP_FLAG_FIN): take_data(1);
            (false, true, false, _, _): take_data(0);
            (false, false, false, ROLE_LTE, TCP_FLAG_ACK &&& TCP_FLAG_ACK): take_ack();
            (false, false, false, ROLE_WIFI, TCP_FLAG_ACK &&& TCP_FLAG_ACK): take_ack();
        }
        const default_action = NoAction();
        size = 8;
    }

    @hidden
    action take_flags(bit<1> copies_count, bit<1> copy, bit<1> options) {
        flow.helper_copies = copies_count;
        flow.copying = copy;
        flow.boost_options = options;
    }

    /* The flags of the packet and its policy: the helper's copies count while it is up in an epoch (not 0); a
     * segment is copied if it carries payload, SYN or FIN and the policy boosts or retransmits (hold only needs no
     * copies); an ACK is boosted only with options the switch reads all of: none, timestamps only, or timestamps and
     * SACK blocks. */
    @hidden
    table packet_plan {
        key = {
            flow.kind: ternary;
            flow.helper_ok: ternary;
            flow.helper_epoch: ternary;
            flow.boosts_max: ternary;
            flow.requests_max: ternary;
            md.tcp_payload_bytes: ternary;
            hdr.wire.tcp.flags: ternary;
            hdr.wire.tcp.data_offset: ternary;
            hdr.tcp_timestamps.isValid(): ternary;
            hdr.tcp_timestamps.nop1: ternary;
            hdr.tcp_timestamps.nop2: ternary;
            hdr.tcp_timestamps.kind: ternary;
            hdr.tcp_timestamps.length: ternary;
            hdr.sack_blocks[0].isValid(): ternary;
        }
        actions = {
            take_flags;
        }
        const entries = {
            (_, 0, _, _, _, _, _, _, _, _, _, _, _, _): take_flags(0, 0, 0);
            (_, _, 0, _, _, _, _, _, _, _, _, _, _, _): take_flags(0, 0, 0);
            (KIND_DATA, _, _, 0, 0, _, _, _, _, _, _, _, _, _): take_flags(1, 0, 0);
            (KIND_DATA, _, _, _, _, 0, 0 &&& (TCP_FLAG_SYN | TCP_FLAG_FIN), _, _, _, _, _, _, _): take_flags(1, 0, 0);
            (KIND_DATA, _, _, _, _, _, _, _, _, _, _, _, _, _): take_flags(1, 1, 0);
            (KIND_ACK, _, _, _, _, _, _, TCP_DATA_OFFSET_MIN, _, _, _, _, _, _): take_flags(1, 0, 1);
            (KIND_ACK, _, _, _, _, _, _, TCP_DATA_OFFSET_TIMESTAMPS, true, TCP_OPTION_NOP, TCP_OPTION_NOP,
             TCP_OPTION_TIMESTAMPS, TCP_OPTION_TIMESTAMPS_LENGTH, _): take_flags(1, 0, 1);
            (KIND_ACK, _, _, _, _, _, _, _, true, TCP_OPTION_NOP, TCP_OPTION_NOP, TCP_OPTION_TIMESTAMPS,
             TCP_OPTION_TIMESTAMPS_LENGTH, true): take_flags(1, 0, 1);
        }
        const default_action = take_flags(1, 0, 0);
        size = 8;
    }

    @hidden
    action data_end() {
        flow.in_b = hdr.wire.tcp.seq_no + flow.length;
    }

    @hidden
    action lowest_edge_0(bit<1> duplicate) {
        flow.in_b = hdr.sack_blocks[0].left_edge;
        flow.dsack = duplicate;
    }

    @hidden
    action lowest_edge_1(bit<1> duplicate) {
        flow.in_b = hdr.sack_blocks[1].left_edge;
        flow.dsack = duplicate;
    }

    @hidden
    action lowest_edge_2(bit<1> duplicate) {
        flow.in_b = hdr.sack_blocks[2].left_edge;
        flow.dsack = duplicate;
    }

    /* A segment's end; an ACK's lowest SACK left edge and D-SACK (RFC 2883: a first block below the ACK number, or
     * inside the second block), from the signs of the differences: block 2 if valid and below 0 and 1, else block 1
     * if valid and below 0, else block 0 (no SACK: any). */
    @hidden
    table segment_bounds {
        key = {
            flow.kind: ternary;
            hdr.sack_blocks[0].isValid(): ternary;
            hdr.sack_blocks[1].isValid(): ternary;
            hdr.sack_blocks[2].isValid(): ternary;
            d01[31:31]: ternary;
            d02[31:31]: ternary;
            d12[31:31]: ternary;
            below_ack[31:31]: ternary;
            right_inside[31:31]: ternary;
        }
        actions = {
            data_end;
            lowest_edge_0;
            lowest_edge_1;
            lowest_edge_2;
            @defaultonly NoAction;
        }
        const entries = {
            (KIND_DATA, _, _, _, _, _, _, _, _): data_end();
            /* lowest edge 2; D-SACK by block 0 below the ACK number or inside block 1 */
            (KIND_ACK, true, _, true, _, 0, 0, 1, _): lowest_edge_2(1);
            (KIND_ACK, _, true, true, 0, 0, 0, _, 0): lowest_edge_2(1);
            (KIND_ACK, _, _, true, _, 0, 0, _, _): lowest_edge_2(0);
            /* lowest edge 1 */
            (KIND_ACK, true, true, _, 0, _, _, 1, _): lowest_edge_1(1);
            (KIND_ACK, _, true, _, 0, _, _, _, 0): lowest_edge_1(1);
            (KIND_ACK, _, true, _, 0, _, _, _, _): lowest_edge_1(0);
            /* lowest edge 0 (with block 1 above it: no D-SACK inside block 1) */
            (KIND_ACK, true, _, _, _, _, _, 1, _): lowest_edge_0(1);
            (KIND_ACK, _, _, _, _, _, _, _, _): lowest_edge_0(0);
        }
        const default_action = NoAction();
        size = 16;
    }

    /* A packet that outcome's later entries would take, counted under no decision. */
    @hidden
    action no_decision() {
    }

    /* Each packet counts its most specific decision (a Counter runs once per packet on Tofino). */
    @hidden
    action drop_confirmation() {
        dprsr_md.drop_ctl = 1;
    }

    @hidden
    action count_confirmation() {
        dprsr_md.drop_ctl = 1;
        decisions.count(VISIBLE_COPIES_CONFIRMED);
    }

    @hidden
    action count_decision(bit<8> decision) {
        decisions.count(decision);
    }

    @hidden
    action copy_segment() {
        to_helper(HELPER_DATA_COPY);
        decisions.count(VISIBLE_DATA_COPIED);
    }

    @hidden
    action send_boosted() {
        hdr.wire.tcp.ack_no = flow.target;
        tcp_rewritten = true;
        decisions.count(VISIBLE_BOOSTED);
    }

    @hidden
    action drop_held() {
        dprsr_md.drop_ctl = 1;
        decisions.count(VISIBLE_HELD);
    }

    @hidden
    action request_retransmit() {
        to_helper(HELPER_RETRANSMIT);
        decisions.count(VISIBLE_RETRANSMIT_REQUESTED);
    }

    @hidden
    action report_ack() {
        to_helper(HELPER_ACK_REPORT);
        decisions.count(VISIBLE_ACK_REPORTED);
    }

    @hidden
    table outcome {
        key = {
            flow.kind: ternary;
            flow.owner: ternary;
            flow.moved: ternary;
            flow.copying: ternary;
            flow.allows: ternary;
            flow.target: ternary;
            flow.held: ternary;
            flow.requested: ternary;
            flow.seen: ternary;
            flow.order: ternary;
            flow.owed: ternary;
            flow.helper_ok: ternary;
            flow.due: ternary;
            flow.hide: ternary;
        }
        actions = {
            drop_confirmation;
            count_confirmation;
            count_decision;
            copy_segment;
            send_boosted;
            drop_held;
            request_retransmit;
            report_ack;
            no_decision;
        }
        const entries = {
            (KIND_CONFIRMATION, OWNER_SELF, 1, _, _, _, _, _, _, _, _, _, _, _): count_confirmation();
            (KIND_CONFIRMATION, _, _, _, _, _, _, _, _, _, _, _, _, _): drop_confirmation();
            (KIND_DATA, 0, _, _, _, _, _, _, _, _, _, _, _, _): no_decision();
            (KIND_DATA, OWNER_OTHER, _, _, _, _, _, _, _, _, _, _, _, _): count_decision(VISIBLE_UNTRACKED);
            (KIND_DATA, _, _, 1, _, _, _, _, _, _, _, _, _, _): copy_segment();
            (KIND_DATA, _, _, 0, _, _, _, _, _, _, _, _, _, _): count_decision(VISIBLE_DATA_TRACKED);
            (KIND_ACK, OWNER_OTHER, _, _, _, _, _, _, _, _, _, _, _, _): count_decision(VISIBLE_UNTRACKED);
            /* dup-ACKs (any burst predicate): held, requested, forwarded, else boosted (only a BOOST or BOTH) */
            (KIND_ACK, OWNER_SELF, _, _, _, 0, 1, _, _, _, _, _, _, _): drop_held();
            (KIND_ACK, OWNER_SELF, _, _, _, 0, _, 1, _, _, _, _, _, _): request_retransmit();
            (KIND_ACK, OWNER_SELF, _, _, BURST_NONE, 0, _, _, _, _, _, _, _, _):
                count_decision(VISIBLE_DUP_ACK_FORWARDED);
            (KIND_ACK, OWNER_SELF, _, _, BURST_HOLD, 0, _, _, _, _, _, _, _, _):
                count_decision(VISIBLE_DUP_ACK_FORWARDED);
            (KIND_ACK, OWNER_SELF, _, _, BURST_BOOST, 0, _, _, _, _, _, _, _, _):
                count_decision(VISIBLE_DUP_ACK_FORWARDED);
            (KIND_ACK, OWNER_SELF, _, _, BURST_BOTH, 0, _, _, _, _, _, _, _, _):
                count_decision(VISIBLE_DUP_ACK_FORWARDED);
            (KIND_ACK, OWNER_SELF, _, _, BURST_BOOST, _, _, _, _, _, _, _, _, _): send_boosted();
            (KIND_ACK, OWNER_SELF, _, _, BURST_BOTH, _, _, _, _, _, _, _, _, _): send_boosted();
            /* new ACKs (the first or a newer one): owed bytes requested, the ACK reported, SACK hidden */
            (KIND_ACK, OWNER_SELF, _, _, _, _, _, _, _, _, 1, 1, _, _): request_retransmit();
            (KIND_ACK, OWNER_SELF, _, _, _, _, _, _, _, _, _, _, 1, _): report_ack();
            (KIND_ACK, OWNER_SELF, _, _, _, _, _, _, _, _, _, _, _, 1): count_decision(VISIBLE_SACK_HIDDEN);
            (KIND_ACK, OWNER_SELF, _, _, _, _, _, _, WINDOW_FIRST, _, _, _, _, _): count_decision(VISIBLE_NEW_ACK);
            (KIND_ACK, OWNER_SELF, _, _, _, _, _, _, WINDOW_FIRST_SAME, _, _, _, _, _): count_decision(VISIBLE_NEW_ACK);
            (KIND_ACK, OWNER_SELF, _, _, _, _, _, _, _, ORDER_NEWER, _, _, _, _): count_decision(VISIBLE_NEW_ACK);
        }
        const default_action = no_decision();
        size = 32;
    }

    apply {
        /* A flag or result that no table writes stays 0, what the step tables match on. */
        flow.kind = KIND_NONE;
        flow.enabled = 0;
        flow.hold_budget = 0;
        flow.slack = 0;
        flow.boosts_max = 0;
        flow.requests_max = 0;
        flow.report_every = 0;
        flow.helper_ok = 0;
        flow.helper_epoch = 0;
        flow.helper_copies = 0;
        flow.copying = 0;
        flow.boost_options = 0;
        flow.dsack = 0;
        flow.owner = 0;
        flow.seen = 0;
        flow.order = 0;
        flow.outstanding = 0;
        flow.copies = 0;
        flow.started = 0;
        flow.allows = 0;
        flow.moved = 0;
        flow.due = 0;
        flow.target = 0;
        flow.owed = 0;
        flow.held = 0;
        flow.hide = 0;
        flow.requested = 0;
        tcp_rewritten = false;
        /* What needs only the packet and its policy first, side by side; then one table per register. */
        flow.flow_id = key_hash.get({hdr.wire.ipv4.src_addr, hdr.wire.ipv4.dst_addr,
                                     hdr.wire.tcp.src_port, hdr.wire.tcp.dst_port});
        params.apply();
        helper.apply();
        packet_kind.apply();
        sack_differences();
        take_limits();
        packet_plan.apply();
        segment_bounds.apply();
        flow_state.apply(hdr, flow, now);
        ack_state.apply(hdr, md, flow, now);
        outcome.apply();
        /* Apart from outcome's helper copy: one action cannot write the mirror's fields and the SACK blocks that
         * may share their containers. */
        if (flow.hide == 1) {
            sack_to_nops();
            tcp_rewritten = true;
        }
    }
}

#endif  // TNG_TNA_VISIBLE_P4
