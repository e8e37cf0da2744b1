/*
 * TNA VISIBLE: the registers that decide on an ACK (tna/visible.p4 says how VISIBLE runs), in their stages: burst
 * counts a dup-ACK; confirmed_end and reported_ack follow; sent_ack boosts a dup-ACK or finds owed bytes; hold_since
 * holds a dup-ACK or lets a new ACK hide its SACK blocks; retransmits asks the helper. A claim resets them all. One
 * table per register chooses the register's action from the packet's kind and the verdicts before it.
 */
#ifndef TNG_TNA_VISIBLE_ACK_STATE_P4
#define TNG_TNA_VISIBLE_ACK_STATE_P4

#include <core.p4>
#include <tna.p4>

#include "shared/arith.p4"
#include "shared/pipeline_header.p4"
#include "tna/visible_define.p4"

control VisibleAckState(in tng_headers_t hdr, in tng_metadata_t md, inout visible_flow_t flow, in bit<32> now) {
    /* A pair with hi unused: a register action returns its predicate only from a pair. */
    @name(".ingress.visible.burst")
    Register<visible_pair_t, flow_cell_t>(VISIBLE_FLOW_CELLS, {0, 0}) burst;  // {dup_acks, unused}
    @name(".ingress.visible.confirmed_end")
    Register<visible_pair_t, flow_cell_t>(VISIBLE_FLOW_CELLS, {0, 0}) confirmed_end;  // {end, cap}
    @name(".ingress.visible.reported_ack")
    Register<bit<32>, flow_cell_t>(VISIBLE_FLOW_CELLS, 0) reported_ack;
    @name(".ingress.visible.sent_ack")
    Register<bit<32>, flow_cell_t>(VISIBLE_FLOW_CELLS, 0) sent_ack;
    @name(".ingress.visible.hold_since")
    Register<bit<32>, flow_cell_t>(VISIBLE_FLOW_CELLS, 0) hold_since;  // 0: not holding
    @name(".ingress.visible.retransmits")
    Register<bit<32>, flow_cell_t>(VISIBLE_FLOW_CELLS, 0) retransmits;

    /* burst: lo counts the burst's dup-ACKs plus the next one (so that the comparisons need no offset); hi is unused.
     * No EWMA of burst lengths: a stateful ALU compares one register half with the packet, not the two halves with
     * each other (dup-ACKs - EWMA), so the hold limit is hold_slack. A claim or a new ACK starts a burst. */
    RegisterAction<visible_pair_t, flow_cell_t, bit<8>>(burst) restart_burst = {
        void apply(inout visible_pair_t b) {
            b.lo = VISIBLE_TNA_DUP;
        }
    };

    /* Counts the dup-ACK: held while dup_acks <= hold_slack, boosted while dup_acks <= boost_max. */
    RegisterAction<visible_pair_t, flow_cell_t, bit<8>>(burst) count_dup = {
        void apply(inout visible_pair_t b, out bit<8> result) {
            result = this.predicate(b.lo <= flow.slack_dups, b.lo <= flow.boost_dups);
            b.lo = b.lo |+| VISIBLE_TNA_DUP;
        }
    };

    /* confirmed_end: the helper confirmed copies from the receiver's ACK up to here. */
    RegisterAction<visible_pair_t, flow_cell_t, bit<32>>(confirmed_end) reset_confirmed = {
        void apply(inout visible_pair_t confirmed) {
            confirmed.lo = flow.in_c;
        }
    };

    /* Returns 1 when the confirmed range's end (in_c) moved confirmed_end. */
    RegisterAction<visible_pair_t, flow_cell_t, bit<32>>(confirmed_end) confirm = {
        void apply(inout visible_pair_t confirmed, out bit<32> result) {
            result = 0;
            if (seq_before(confirmed.lo, flow.in_c)) {
                confirmed.lo = flow.in_c;
                result = 1;
            }
        }
    };

    /* Returns the boost cap: forwarded_end's cap, lowered to confirmed_end. */
    RegisterAction<visible_pair_t, flow_cell_t, bit<32>>(confirmed_end) cap_confirmed = {
        void apply(inout visible_pair_t confirmed, out bit<32> cap) {
            if (seq_before(confirmed.lo, flow.fwd_cap)) {
                confirmed.hi = confirmed.lo;
            } else {
                confirmed.hi = flow.fwd_cap;
            }
            cap = confirmed.hi;
        }
    };

    RegisterAction<bit<32>, flow_cell_t, bit<8>>(reported_ack) forget_reported = {
        void apply(inout bit<32> reported) {
            reported = 0;
        }
    };

    /* Returns 1 when the receiver's ACK (in_a) advanced by report_bytes since the last report. */
    RegisterAction<bit<32>, flow_cell_t, bit<8>>(reported_ack) report = {
        void apply(inout bit<32> reported, out bit<8> result) {
            result = 0;
            if (!seq_before(flow.report_below, reported)) {
                reported = flow.in_a;
                result = 1;
            }
        }
    };

    /* sent_ack: the highest ACK number sent to the sender. Returns the boosted ACK number, 0 if not boosted:
     * VISIBLE_TNA_BOOST_BYTES more, at most the cap (in_c). A stateful ALU compares a register half with one packet
     * value and a constant, so the step is a constant rather than the policy's segment_size (two packet values). */
    RegisterAction<bit<32>, flow_cell_t, bit<32>>(sent_ack) boost = {
        void apply(inout bit<32> sent, out bit<32> result) {
            result = 0;
            if ((int<32>)(sent - flow.in_c) < -VISIBLE_TNA_BOOST_BYTES) {
                sent = sent + VISIBLE_TNA_BOOST_BYTES;
                result = sent;
            } else if (seq_before(sent, flow.in_c)) {
                sent = flow.in_c;
                result = sent;
            }
        }
    };

    /* A new ACK (in_c). Returns 1 if the sender was sent a higher one: the switch owes it those bytes. */
    RegisterAction<bit<32>, flow_cell_t, bit<8>>(sent_ack) advance_sent = {
        void apply(inout bit<32> sent, out bit<8> result) {
            result = 0;
            if (seq_before(sent, flow.in_c)) {
                sent = flow.in_c;
            } else if (seq_before(flow.in_c, sent)) {
                result = 1;
            }
        }
    };

    RegisterAction<bit<32>, flow_cell_t, bit<8>>(sent_ack) first_sent = {
        void apply(inout bit<32> sent) {
            sent = flow.in_c;
        }
    };

    /* hold_since: when the burst's hold clock started (its first hold or last boost), 0 if not holding. */
    RegisterAction<bit<32>, flow_cell_t, bit<8>>(hold_since) clear_hold = {
        void apply(inout bit<32> since) {
            since = 0;
        }
    };

    RegisterAction<bit<32>, flow_cell_t, bit<8>>(hold_since) restart_hold = {
        void apply(inout bit<32> since) {
            since = now;
        }
    };

    /* Returns 1 if the dup-ACK is held: the clock starts now or has not spent hold_budget_us yet. */
    RegisterAction<bit<32>, flow_cell_t, bit<8>>(hold_since) hold_dup = {
        void apply(inout bit<32> since, out bit<8> result) {
            result = 0;
            if (since == 0) {
                since = now;
                result = 1;
            } else if (seq_before(flow.hold_stale, since)) {
                result = 1;
            }
        }
    };

    /* A new ACK that may hide its SACK blocks: returns 1 if the burst stayed within the budget, whose clock then
     * starts for the next hole. */
    RegisterAction<bit<32>, flow_cell_t, bit<8>>(hold_since) end_hold_hide = {
        void apply(inout bit<32> since, out bit<8> result) {
            result = 0;
            if (since == 0 || seq_before(flow.hold_stale, since)) {
                since = now;
                result = 1;
            } else {
                since = 0;
            }
        }
    };

    RegisterAction<bit<32>, flow_cell_t, bit<8>>(retransmits) reset_requests = {
        void apply(inout bit<32> requests) {
            requests = 0;
        }
    };

    /* A new ACK's request for owed bytes counts as the new burst's first. */
    RegisterAction<bit<32>, flow_cell_t, bit<8>>(retransmits) owe_request = {
        void apply(inout bit<32> requests) {
            requests = 1;
        }
    };

    /* Returns 1 if the dup-ACK goes to the helper as a request. */
    RegisterAction<bit<32>, flow_cell_t, bit<8>>(retransmits) request = {
        void apply(inout bit<32> requests, out bit<8> result) {
            result = 0;
            if (requests < (bit<32>)flow.requests_max) {
                requests = requests + 1;
                result = 1;
            }
        }
    };

    @hidden
    action restart_burst_of() {
        restart_burst.execute(VISIBLE_CELL);
    }

    @hidden
    action count_dup_of() {
        flow.allows = count_dup.execute(VISIBLE_CELL);
    }

    /* RFC 5681's dup-ACK (the receiver's ACK again, no payload, SYN, FIN or RST, data outstanding, the same window;
     * an ACK with SACK blocks counts whatever its window) is counted; a claim, the first ACK or a newer one starts a
     * burst. */
    @hidden
    table burst_step {
        key = {
            flow.kind: ternary;
            flow.owner: ternary;
            flow.seen: ternary;
            flow.order: ternary;
            flow.outstanding: ternary;
            md.tcp_payload_bytes: ternary;
            hdr.wire.tcp.flags: ternary;
            hdr.sack_blocks[0].isValid(): ternary;
        }
        actions = {
            restart_burst_of;
            count_dup_of;
            @defaultonly NoAction;
        }
        const entries = {
            (KIND_DATA, OWNER_CLAIMED, _, _, _, _, _, _): restart_burst_of();
            (KIND_ACK, OWNER_SELF, WINDOW_SAME, ORDER_SAME, 1, 0,
             0 &&& (TCP_FLAG_SYN | TCP_FLAG_FIN | TCP_FLAG_RST), _): count_dup_of();
            (KIND_ACK, OWNER_SELF, WINDOW_CHANGED, ORDER_SAME, 1, 0,
             0 &&& (TCP_FLAG_SYN | TCP_FLAG_FIN | TCP_FLAG_RST), true): count_dup_of();
            (KIND_ACK, OWNER_SELF, WINDOW_FIRST, _, _, _, _, _): restart_burst_of();
            (KIND_ACK, OWNER_SELF, WINDOW_FIRST_SAME, _, _, _, _, _): restart_burst_of();
            (KIND_ACK, OWNER_SELF, _, ORDER_NEWER, _, _, _, _): restart_burst_of();
        }
        const default_action = NoAction();
        size = 8;
    }

    @hidden
    action reset_confirmed_of() {
        reset_confirmed.execute(VISIBLE_CELL);
    }

    @hidden
    action confirm_of() {
        flow.moved = confirm.execute(VISIBLE_CELL);
    }

    @hidden
    action cap_confirmed_of() {
        flow.in_c = cap_confirmed.execute(VISIBLE_CELL);
    }

    /* Copies that start here reset confirmed_end; a confirmation counts if it starts within what the receiver
     * acknowledged (not newer) and the copies are of the helper's epoch; a dup-ACK that may be boosted takes its cap.
     * A masked predicate bit: WINDOW_FIRST and WINDOW_FIRST_SAME are bits 2 and 3, ORDER_NEWER bit 2. */
    @hidden
    table confirmed_end_step {
        key = {
            flow.kind: ternary;
            flow.owner: ternary;
            flow.started: ternary;
            flow.copies: ternary;
            flow.helper_copies: ternary;
            flow.boost_options: ternary;
            flow.seen: ternary;
            flow.order: ternary;
            flow.allows: ternary;
        }
        actions = {
            reset_confirmed_of;
            confirm_of;
            cap_confirmed_of;
            @defaultonly NoAction;
        }
        const entries = {
            (KIND_DATA, _, 1, _, _, _, _, _, _): reset_confirmed_of();
            (KIND_CONFIRMATION, OWNER_SELF, _, 1, 1, _, 0 &&& 0x0c, 0 &&& 0x04, _): confirm_of();
            (KIND_ACK, OWNER_SELF, _, 1, _, 1, _, _, BURST_BOOST): cap_confirmed_of();
            (KIND_ACK, OWNER_SELF, _, 1, _, 1, _, _, BURST_BOTH): cap_confirmed_of();
        }
        const default_action = NoAction();
        size = 4;
    }

    @hidden
    action forget_reported_of() {
        forget_reported.execute(VISIBLE_CELL);
    }

    @hidden
    action report_of() {
        flow.due = report.execute(VISIBLE_CELL);
    }

    /* A new ACK: the first (seen bit 2 or 3) or a newer one. */
    @hidden
    table reported_ack_step {
        key = {
            flow.kind: ternary;
            flow.owner: ternary;
            flow.seen: ternary;
            flow.order: ternary;
            flow.copies: ternary;
            flow.helper_copies: ternary;
        }
        actions = {
            forget_reported_of;
            report_of;
            @defaultonly NoAction;
        }
        const entries = {
            (KIND_DATA, OWNER_CLAIMED, _, _, _, _): forget_reported_of();
            (KIND_ACK, OWNER_SELF, WINDOW_FIRST, _, 1, 1): report_of();
            (KIND_ACK, OWNER_SELF, WINDOW_FIRST_SAME, _, 1, 1): report_of();
            (KIND_ACK, OWNER_SELF, _, ORDER_NEWER, 1, 1): report_of();
        }
        const default_action = NoAction();
        size = 4;
    }

    @hidden
    action boost_of() {
        flow.target = boost.execute(VISIBLE_CELL);
    }

    @hidden
    action first_sent_of() {
        first_sent.execute(VISIBLE_CELL);
    }

    @hidden
    action advance_sent_of() {
        flow.owed = advance_sent.execute(VISIBLE_CELL);
    }

    @hidden
    table sent_ack_step {
        key = {
            flow.kind: ternary;
            flow.owner: ternary;
            flow.allows: ternary;
            flow.copies: ternary;
            flow.boost_options: ternary;
            flow.seen: ternary;
            flow.order: ternary;
        }
        actions = {
            boost_of;
            first_sent_of;
            advance_sent_of;
            @defaultonly NoAction;
        }
        const entries = {
            (KIND_ACK, OWNER_SELF, BURST_BOOST, 1, 1, _, _): boost_of();
            (KIND_ACK, OWNER_SELF, BURST_BOTH, 1, 1, _, _): boost_of();
            (KIND_ACK, OWNER_SELF, _, _, _, WINDOW_FIRST, _): first_sent_of();
            (KIND_ACK, OWNER_SELF, _, _, _, WINDOW_FIRST_SAME, _): first_sent_of();
            (KIND_ACK, OWNER_SELF, _, _, _, _, ORDER_NEWER): advance_sent_of();
        }
        const default_action = NoAction();
        size = 8;
    }

    /* A dup-ACK that hold_since's later entries would take, left alone. */
    @hidden
    action keep_hold() {
    }

    @hidden
    action clear_hold_of() {
        clear_hold.execute(VISIBLE_CELL);
    }

    @hidden
    action restart_hold_of() {
        restart_hold.execute(VISIBLE_CELL);
    }

    @hidden
    action hold_dup_of() {
        flow.held = hold_dup.execute(VISIBLE_CELL);
    }

    @hidden
    action end_hold_hide_of() {
        flow.hide = end_hold_hide.execute(VISIBLE_CELL);
    }

    /* A boosted dup-ACK restarts the hold clock; one not boosted is held if the burst allows and it is no D-SACK. A
     * newer ACK may hide its SACK blocks (VISIBLE holds, the blocks are no D-SACK) unless it owes a request to the
     * helper; every other new ACK stops the clock. */
    @hidden
    table hold_since_step {
        key = {
            flow.kind: ternary;
            flow.owner: ternary;
            flow.target: ternary;
            flow.allows: ternary;
            flow.dsack: ternary;
            flow.seen: ternary;
            flow.order: ternary;
            flow.hold_budget: ternary;
            hdr.sack_blocks[0].isValid(): ternary;
            flow.owed: ternary;
            flow.helper_ok: ternary;
        }
        actions = {
            clear_hold_of;
            restart_hold_of;
            hold_dup_of;
            end_hold_hide_of;
            keep_hold;
        }
        const entries = {
            (KIND_DATA, OWNER_CLAIMED, _, _, _, _, _, _, _, _, _): clear_hold_of();
            (KIND_ACK, OWNER_SELF, 0, BURST_HOLD, 0, _, _, _, _, _, _): hold_dup_of();
            (KIND_ACK, OWNER_SELF, 0, BURST_BOTH, 0, _, _, _, _, _, _): hold_dup_of();
            (KIND_ACK, OWNER_SELF, 0, BURST_BOOST, _, _, _, _, _, _, _): keep_hold();
            (KIND_ACK, OWNER_SELF, 0, BURST_BOTH, _, _, _, _, _, _, _): keep_hold();
            (KIND_ACK, OWNER_SELF, _, BURST_BOOST, _, _, _, _, _, _, _): restart_hold_of();
            (KIND_ACK, OWNER_SELF, _, BURST_BOTH, _, _, _, _, _, _, _): restart_hold_of();
            (KIND_ACK, OWNER_SELF, _, _, _, WINDOW_FIRST, _, _, _, _, _): clear_hold_of();
            (KIND_ACK, OWNER_SELF, _, _, _, WINDOW_FIRST_SAME, _, _, _, _, _): clear_hold_of();
            (KIND_ACK, OWNER_SELF, _, _, _, _, ORDER_NEWER, 0, _, _, _): clear_hold_of();
            (KIND_ACK, OWNER_SELF, _, _, _, _, ORDER_NEWER, _, false, _, _): clear_hold_of();
            (KIND_ACK, OWNER_SELF, _, _, 1, _, ORDER_NEWER, _, _, _, _): clear_hold_of();
            (KIND_ACK, OWNER_SELF, _, _, _, _, ORDER_NEWER, _, _, 1, 1): clear_hold_of();
            (KIND_ACK, OWNER_SELF, _, _, _, _, ORDER_NEWER, _, _, _, _): end_hold_hide_of();
        }
        const default_action = keep_hold();
        size = 16;
    }

    @hidden
    action reset_requests_of() {
        reset_requests.execute(VISIBLE_CELL);
    }

    @hidden
    action owe_request_of() {
        owe_request.execute(VISIBLE_CELL);
    }

    @hidden
    action request_of() {
        flow.requested = request.execute(VISIBLE_CELL);
    }

    /* A dup-ACK neither boosted nor held asks the helper, while the burst's requests last; a new ACK that finds owed
     * bytes makes its request the burst's first, every other new ACK starts the count. Any of the four burst
     * predicates marks a dup-ACK. */
    @hidden
    table retransmits_step {
        key = {
            flow.kind: ternary;
            flow.owner: ternary;
            flow.allows: ternary;
            flow.target: ternary;
            flow.held: ternary;
            flow.copies: ternary;
            flow.helper_copies: ternary;
            flow.seen: ternary;
            flow.order: ternary;
            flow.owed: ternary;
            flow.helper_ok: ternary;
        }
        actions = {
            reset_requests_of;
            owe_request_of;
            request_of;
            @defaultonly NoAction;
        }
        const entries = {
            (KIND_DATA, OWNER_CLAIMED, _, _, _, _, _, _, _, _, _): reset_requests_of();
            (KIND_ACK, OWNER_SELF, BURST_NONE, 0, 0, 1, 1, _, _, _, _): request_of();
            (KIND_ACK, OWNER_SELF, BURST_HOLD, 0, 0, 1, 1, _, _, _, _): request_of();
            (KIND_ACK, OWNER_SELF, BURST_BOOST, 0, 0, 1, 1, _, _, _, _): request_of();
            (KIND_ACK, OWNER_SELF, BURST_BOTH, 0, 0, 1, 1, _, _, _, _): request_of();
            (KIND_ACK, OWNER_SELF, _, _, _, _, _, _, ORDER_NEWER, 1, 1): owe_request_of();
            (KIND_ACK, OWNER_SELF, _, _, _, _, _, WINDOW_FIRST, _, _, _): reset_requests_of();
            (KIND_ACK, OWNER_SELF, _, _, _, _, _, WINDOW_FIRST_SAME, _, _, _): reset_requests_of();
            (KIND_ACK, OWNER_SELF, _, _, _, _, _, _, ORDER_NEWER, _, _): reset_requests_of();
        }
        const default_action = NoAction();
        size = 16;
    }

    apply {
        burst_step.apply();
        confirmed_end_step.apply();
        reported_ack_step.apply();
        sent_ack_step.apply();
        hold_since_step.apply();
        retransmits_step.apply();
    }
}

#endif  // TNG_TNA_VISIBLE_ACK_STATE_P4
