/*
 * TNA VISIBLE: the registers that track a flow (tna/visible.p4 says how VISIBLE runs), in their stages: flow_owner
 * claims, touches or checks the flow's cell; forwarded_end, forwarded_max, ack_window and receiver_ack follow its
 * verdict; copy_state, a stage later, starts or checks the helper's copies. One table per register chooses the
 * register's action from the packet's kind and the verdicts before it.
 */
#ifndef TNG_TNA_VISIBLE_FLOW_STATE_P4
#define TNG_TNA_VISIBLE_FLOW_STATE_P4

#include <core.p4>
#include <tna.p4>

#include "shared/arith.p4"
#include "shared/pipeline_header.p4"
#include "tna/visible_define.p4"

control VisibleFlowState(in tng_headers_t hdr, inout visible_flow_t flow, in bit<32> now) {
    @name(".ingress.visible.flow_owner")
    Register<visible_pair_t, flow_cell_t>(VISIBLE_FLOW_CELLS, {0, 0}) flow_owner;  // {key, last_seen}
    @name(".ingress.visible.forwarded_end")
    Register<visible_pair_t, flow_cell_t>(VISIBLE_FLOW_CELLS, {0, 0}) forwarded_end;  // {end, cap}
    @name(".ingress.visible.forwarded_max")
    Register<bit<32>, flow_cell_t>(VISIBLE_FLOW_CELLS, 0) forwarded_max;
    @name(".ingress.visible.ack_window")
    Register<visible_pair_t, flow_cell_t>(VISIBLE_FLOW_CELLS, {0, 0}) ack_window;  // {window, seen}
    /* A pair with hi unused: a register action returns its predicate only from a pair. */
    @name(".ingress.visible.receiver_ack")
    Register<visible_pair_t, flow_cell_t>(VISIBLE_FLOW_CELLS, {0, 0}) receiver_ack;
    @name(".ingress.visible.copy_state")
    Register<visible_pair_t, flow_cell_t>(VISIBLE_FLOW_CELLS, {0, 0}) copy_state;  // {epoch, start}

    /* flow_owner: a downlink segment takes its own cell or one idle for VISIBLE_TNA_IDLE_TIMEOUT. */
    RegisterAction<visible_pair_t, flow_cell_t, bit<8>>(flow_owner) claim_or_touch = {
        void apply(inout visible_pair_t owner_cell, out bit<8> result) {
            result = this.predicate(owner_cell.lo == flow.flow_id, now - owner_cell.hi > VISIBLE_TNA_IDLE_TIMEOUT);
            if (owner_cell.lo == flow.flow_id) {
                owner_cell.hi = now;
            } else if (now - owner_cell.hi > VISIBLE_TNA_IDLE_TIMEOUT) {
                owner_cell.lo = flow.flow_id;
                owner_cell.hi = now;
            }
        }
    };

    RegisterAction<visible_pair_t, flow_cell_t, bit<8>>(flow_owner) touch = {
        void apply(inout visible_pair_t owner_cell, out bit<8> result) {
            result = this.predicate(owner_cell.lo == flow.flow_id);
            if (owner_cell.lo == flow.flow_id) {
                owner_cell.hi = now;
            }
        }
    };

    RegisterAction<visible_pair_t, flow_cell_t, bit<8>>(flow_owner) check_owner = {
        void apply(inout visible_pair_t owner_cell, out bit<8> result) {
            result = this.predicate(owner_cell.lo == flow.flow_id);
        }
    };

    /* forwarded_end: every sequence number below end went downlink. */
    RegisterAction<visible_pair_t, flow_cell_t, bit<32>>(forwarded_end) claim_end = {
        void apply(inout visible_pair_t fwd) {
            fwd.lo = flow.in_b;
        }
    };

    RegisterAction<visible_pair_t, flow_cell_t, bit<32>>(forwarded_end) advance_end = {
        void apply(inout visible_pair_t fwd) {
            if (!seq_before(fwd.lo, flow.in_a) && seq_before(fwd.lo, flow.in_b)) {
                fwd.lo = flow.in_b;
            }
        }
    };

    /* The receiver has what it acknowledged, so it went through here. Returns end as it was: the cap. */
    RegisterAction<visible_pair_t, flow_cell_t, bit<32>>(forwarded_end) catch_up_end = {
        void apply(inout visible_pair_t fwd, out bit<32> cap) {
            fwd.hi = fwd.lo;
            if (seq_before(fwd.lo, flow.in_a)) {
                fwd.lo = flow.in_a;
            }
            cap = fwd.hi;
        }
    };

    /* The same, the cap lowered to the lowest SACK left edge. */
    RegisterAction<visible_pair_t, flow_cell_t, bit<32>>(forwarded_end) catch_up_end_sack = {
        void apply(inout visible_pair_t fwd, out bit<32> cap) {
            if (seq_before(flow.in_b, fwd.lo)) {
                fwd.hi = flow.in_b;
            } else {
                fwd.hi = fwd.lo;
            }
            if (seq_before(fwd.lo, flow.in_a)) {
                fwd.lo = flow.in_a;
            }
            cap = fwd.hi;
        }
    };

    /* forwarded_max: the highest sequence number forwarded downlink. */
    RegisterAction<bit<32>, flow_cell_t, bit<32>>(forwarded_max) claim_max = {
        void apply(inout bit<32> highest) {
            highest = flow.in_b;
        }
    };

    /* Returns forwarded_max before the segment: copies start there. */
    RegisterAction<bit<32>, flow_cell_t, bit<32>>(forwarded_max) advance_max = {
        void apply(inout bit<32> highest, out bit<32> before) {
            before = highest;
            if (seq_before(highest, flow.in_b)) {
                highest = flow.in_b;
            }
        }
    };

    /* Returns 1 if data above the ACK number is outstanding. */
    RegisterAction<bit<32>, flow_cell_t, bit<8>>(forwarded_max) catch_up_max = {
        void apply(inout bit<32> highest, out bit<8> result) {
            result = 0;
            if (seq_before(highest, flow.in_a)) {
                highest = flow.in_a;
            }
            if (seq_before(flow.in_a, highest)) {
                result = 1;
            }
        }
    };

    RegisterAction<visible_pair_t, flow_cell_t, bit<8>>(ack_window) forget_window = {
        void apply(inout visible_pair_t last) {
            last.hi = 0;
        }
    };

    RegisterAction<visible_pair_t, flow_cell_t, bit<8>>(ack_window) check_window = {
        void apply(inout visible_pair_t last, out bit<8> result) {
            result = this.predicate(last.lo == (bit<32>)hdr.wire.tcp.window, last.hi == 0);
            last.lo = (bit<32>)hdr.wire.tcp.window;
            last.hi = 1;
        }
    };

    RegisterAction<visible_pair_t, flow_cell_t, bit<8>>(ack_window) peek_window = {
        void apply(inout visible_pair_t last, out bit<8> result) {
            result = this.predicate(last.lo == (bit<32>)hdr.wire.tcp.window, last.hi == 0);
        }
    };

    /* receiver_ack starts at the claiming segment's sequence number. */
    RegisterAction<visible_pair_t, flow_cell_t, bit<8>>(receiver_ack) init_ack = {
        void apply(inout visible_pair_t acked) {
            acked.lo = flow.in_a;
        }
    };

    RegisterAction<visible_pair_t, flow_cell_t, bit<8>>(receiver_ack) order_ack = {
        void apply(inout visible_pair_t acked, out bit<8> result) {
            result = this.predicate(acked.lo == flow.in_a, seq_before(acked.lo, flow.in_a));
            if (seq_before(acked.lo, flow.in_a)) {
                acked.lo = flow.in_a;
            }
        }
    };

    RegisterAction<visible_pair_t, flow_cell_t, bit<8>>(receiver_ack) compare_ack = {
        void apply(inout visible_pair_t acked, out bit<8> result) {
            result = this.predicate(acked.lo == flow.in_a, seq_before(acked.lo, flow.in_a));
        }
    };

    /* copy_state: every byte forwarded from start on was copied to the helper in its epoch. Returns 1 when the
     * copies start here (a new epoch: confirmations of an earlier one may come from a helper that lost them). */
    RegisterAction<visible_pair_t, flow_cell_t, bit<8>>(copy_state) claim_copies = {
        void apply(inout visible_pair_t copy, out bit<8> result) {
            copy.lo = (bit<32>)flow.helper_epoch;
            copy.hi = flow.in_c;
            result = 1;
        }
    };

    RegisterAction<visible_pair_t, flow_cell_t, bit<8>>(copy_state) start_copies = {
        void apply(inout visible_pair_t copy, out bit<8> result) {
            result = 0;
            if (copy.lo != (bit<32>)flow.helper_epoch) {
                copy.lo = (bit<32>)flow.helper_epoch;
                copy.hi = flow.in_c;
                result = 1;
            }
        }
    };

    RegisterAction<visible_pair_t, flow_cell_t, bit<8>>(copy_state) forget_copies = {
        void apply(inout visible_pair_t copy) {
            copy.lo = 0;
        }
    };

    /* Returns 1 if the copies belong to the helper's epoch and start at or below in_c. */
    RegisterAction<visible_pair_t, flow_cell_t, bit<8>>(copy_state) check_copies = {
        void apply(inout visible_pair_t copy, out bit<8> result) {
            result = 0;
            if (copy.lo == (bit<32>)flow.helper_epoch && !seq_before(flow.in_c, copy.hi)) {
                result = 1;
            }
        }
    };

    @hidden
    action claim_or_touch_owner() {
        flow.owner = claim_or_touch.execute(VISIBLE_CELL);
    }

    @hidden
    action touch_owner() {
        flow.owner = touch.execute(VISIBLE_CELL);
    }

    @hidden
    action check_owner_of() {
        flow.owner = check_owner.execute(VISIBLE_CELL);
    }

    /* One table per register, in the registers' stage order, each choosing the register's action from the packet's
     * kind and the results before it (Tofino runs one action per register and packet, in one table). */
    @hidden
    table owner_step {
        key = {
            flow.kind: ternary;
            flow.enabled: ternary;
        }
        actions = {
            claim_or_touch_owner;
            touch_owner;
            check_owner_of;
            @defaultonly NoAction;
        }
        const entries = {
            (KIND_CONFIRMATION, _): check_owner_of();
            (KIND_DATA, 1): claim_or_touch_owner();
            (KIND_ACK, 1): touch_owner();
        }
        const default_action = NoAction();
        size = 4;
    }

    @hidden
    action claim_end_of() {
        claim_end.execute(VISIBLE_CELL);
    }

    @hidden
    action advance_end_of() {
        advance_end.execute(VISIBLE_CELL);
    }

    @hidden
    action catch_up_end_of() {
        flow.fwd_cap = catch_up_end.execute(VISIBLE_CELL);
    }

    @hidden
    action catch_up_end_sack_of() {
        flow.fwd_cap = catch_up_end_sack.execute(VISIBLE_CELL);
    }

    @hidden
    table forwarded_end_step {
        key = {
            flow.kind: ternary;
            flow.owner: ternary;
            hdr.sack_blocks[0].isValid(): ternary;
        }
        actions = {
            claim_end_of;
            advance_end_of;
            catch_up_end_of;
            catch_up_end_sack_of;
            @defaultonly NoAction;
        }
        const entries = {
            (KIND_DATA, OWNER_CLAIMED, _): claim_end_of();
            (KIND_DATA, OWNER_SELF, _): advance_end_of();
            (KIND_DATA, OWNER_SELF_IDLE, _): advance_end_of();
            (KIND_ACK, OWNER_SELF, true): catch_up_end_sack_of();
            (KIND_ACK, OWNER_SELF, false): catch_up_end_of();
        }
        const default_action = NoAction();
        size = 8;
    }

    /* A claim's copies start at its sequence number, a segment's at forwarded_max before it. */
    @hidden
    action claim_max_of() {
        claim_max.execute(VISIBLE_CELL);
        flow.in_c = hdr.wire.tcp.seq_no;
    }

    @hidden
    action advance_max_of() {
        flow.in_c = advance_max.execute(VISIBLE_CELL);
    }

    @hidden
    action catch_up_max_of() {
        flow.outstanding = catch_up_max.execute(VISIBLE_CELL);
    }

    @hidden
    table forwarded_max_step {
        key = {
            flow.kind: ternary;
            flow.owner: ternary;
        }
        actions = {
            claim_max_of;
            advance_max_of;
            catch_up_max_of;
            @defaultonly NoAction;
        }
        const entries = {
            (KIND_DATA, OWNER_CLAIMED): claim_max_of();
            (KIND_DATA, OWNER_SELF): advance_max_of();
            (KIND_DATA, OWNER_SELF_IDLE): advance_max_of();
            (KIND_ACK, OWNER_SELF): catch_up_max_of();
        }
        const default_action = NoAction();
        size = 4;
    }

    @hidden
    action forget_window_of() {
        forget_window.execute(VISIBLE_CELL);
    }

    @hidden
    action check_window_of() {
        flow.seen = check_window.execute(VISIBLE_CELL);
    }

    @hidden
    action peek_window_of() {
        flow.seen = peek_window.execute(VISIBLE_CELL);
    }

    @hidden
    table ack_window_step {
        key = {
            flow.kind: ternary;
            flow.owner: ternary;
        }
        actions = {
            forget_window_of;
            check_window_of;
            peek_window_of;
            @defaultonly NoAction;
        }
        const entries = {
            (KIND_DATA, OWNER_CLAIMED): forget_window_of();
            (KIND_ACK, OWNER_SELF): check_window_of();
            (KIND_CONFIRMATION, OWNER_SELF): peek_window_of();
        }
        const default_action = NoAction();
        size = 4;
    }

    @hidden
    action init_ack_of() {
        init_ack.execute(VISIBLE_CELL);
    }

    @hidden
    action order_ack_of() {
        flow.order = order_ack.execute(VISIBLE_CELL);
    }

    @hidden
    action compare_ack_of() {
        flow.order = compare_ack.execute(VISIBLE_CELL);
    }

    @hidden
    table receiver_ack_step {
        key = {
            flow.kind: ternary;
            flow.owner: ternary;
        }
        actions = {
            init_ack_of;
            order_ack_of;
            compare_ack_of;
            @defaultonly NoAction;
        }
        const entries = {
            (KIND_DATA, OWNER_CLAIMED): init_ack_of();
            (KIND_ACK, OWNER_SELF): order_ack_of();
            (KIND_CONFIRMATION, OWNER_SELF): compare_ack_of();
        }
        const default_action = NoAction();
        size = 4;
    }

    @hidden
    action claim_copies_of() {
        flow.started = claim_copies.execute(VISIBLE_CELL);
    }

    @hidden
    action start_copies_of() {
        flow.started = start_copies.execute(VISIBLE_CELL);
    }

    @hidden
    action forget_copies_of() {
        forget_copies.execute(VISIBLE_CELL);
    }

    @hidden
    action check_copies_of() {
        flow.copies = check_copies.execute(VISIBLE_CELL);
    }

    @hidden
    table copy_state_step {
        key = {
            flow.kind: ternary;
            flow.owner: ternary;
            flow.copying: ternary;
        }
        actions = {
            claim_copies_of;
            start_copies_of;
            forget_copies_of;
            check_copies_of;
            @defaultonly NoAction;
        }
        const entries = {
            (KIND_DATA, OWNER_CLAIMED, 1): claim_copies_of();
            (KIND_DATA, OWNER_CLAIMED, 0): forget_copies_of();
            (KIND_DATA, OWNER_SELF, 1): start_copies_of();
            (KIND_DATA, OWNER_SELF_IDLE, 1): start_copies_of();
            (KIND_ACK, OWNER_SELF, _): check_copies_of();
            (KIND_CONFIRMATION, OWNER_SELF, _): check_copies_of();
        }
        const default_action = NoAction();
        size = 8;
    }

    apply {
        owner_step.apply();
        forwarded_end_step.apply();
        forwarded_max_step.apply();
        ack_window_step.apply();
        receiver_ack_step.apply();
        copy_state_step.apply();
    }
}

#endif  // TNG_TNA_VISIBLE_FLOW_STATE_P4
