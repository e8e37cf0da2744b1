/*
 * TNA: VISIBLE on the TCP ACKs of steered downlink flows, v1model/visible.p4's state machine restructured for
 * Tofino 1's stateful ALUs: a packet runs at most one RegisterAction per register, in the register's stage; an action
 * reads and writes a cell of at most two 32-bit halves, makes at most two comparisons, and a register takes at most
 * two 32-bit PHV inputs for all its actions; a result is a half, an ALU result or a predicate (an enum only from a
 * pair); a stage holds four registers. So the per-flow state is split into registers, each fed by the ones before it
 * (it runs in egress, tna/tng.p4, where the packet's ingress verdict is known; the stage of each register when
 * compiled alone):
 *
 *    1  flow_owner     {key, last_seen}   claim (downlink), touch (uplink), check (confirmation) the cell
 *    3  forwarded_end  {end, cap}         v1model's forwarded_end; an ACK's cap: min(end, lowest SACK left edge)
 *    3  ack_window     {window, seen}     the last ACK's window (v1model's receiver_window and ack_seen)
 *    3  receiver_ack                      an ACK is the same, newer or other; a confirmation starts within it?
 *    4  forwarded_max                     v1model's forwarded_max; an ACK learns whether data is outstanding
 *    5  burst          {dup_acks, -}      counts a dup-ACK, says whether it may be held or boosted
 *    5  copy_state     {epoch, start}     starts copies in the helper's epoch; the ACK is covered by copies?
 *    6  confirmed_end  {end, cap}         the helper confirmed copies up to here; a dup-ACK's cap: min(end, cap)
 *    6  reported_ack                      reports the receiver's ACK every report_bytes
 *    7  sent_ack                          boosts a dup-ACK; a new ACK finds owed bytes
 *    8  hold_since                        holds a dup-ACK within the budget; a new ACK hides SACK blocks
 *    9  retransmits                       retransmission requests of the burst
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

#include "shared/arith.p4"
#include "shared/pipeline_header.p4"
#include "shared/size.p4"

/* A cell is taken over after this long without packets of its flow (1 s: the controller's default). */
#define VISIBLE_TNA_IDLE_TIMEOUT 3906250
/* burst counts dup-ACKs in units of 2^-VISIBLE_EWMA_FRACTION_BITS, as v1model's. */
#define VISIBLE_TNA_DUP (1 << VISIBLE_EWMA_FRACTION_BITS)
/* What a boost adds to the ACK number (a full Ethernet segment of TCP with timestamps). */
#define VISIBLE_TNA_BOOST_BYTES 1448

typedef bit<VISIBLE_FLOW_INDEX_BITS> flow_cell_t;

struct visible_pair_t {
    bit<32> lo;
    bit<32> hi;
}

enum owner_t { OTHER, SELF, CLAIMED }
enum window_t { FIRST, SAME, CHANGED }   // no ACK before, the same window, another window
enum order_t { OTHER, SAME, NEWER }      // the ACK number against the receiver's ACK
enum burst_t { NONE, HOLD, BOOST, BOTH } // what the burst's length still allows

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

    Register<visible_pair_t, flow_cell_t>(VISIBLE_FLOW_CELLS, {0, 0}) flow_owner;     // {key, last_seen}
    Register<visible_pair_t, flow_cell_t>(VISIBLE_FLOW_CELLS, {0, 0}) forwarded_end;  // {end, cap}
    Register<bit<32>, flow_cell_t>(VISIBLE_FLOW_CELLS, 0) forwarded_max;
    Register<visible_pair_t, flow_cell_t>(VISIBLE_FLOW_CELLS, {0, 0}) ack_window;     // {window, seen}
    /* A pair with hi unused: a RegisterAction returns an enum (its predicate) only from a pair. */
    Register<visible_pair_t, flow_cell_t>(VISIBLE_FLOW_CELLS, {0, 0}) receiver_ack;
    Register<visible_pair_t, flow_cell_t>(VISIBLE_FLOW_CELLS, {0, 0}) burst;          // {dup_acks, unused}
    Register<visible_pair_t, flow_cell_t>(VISIBLE_FLOW_CELLS, {0, 0}) copy_state;     // {epoch, start}
    Register<visible_pair_t, flow_cell_t>(VISIBLE_FLOW_CELLS, {0, 0}) confirmed_end;  // {end, cap}
    Register<bit<32>, flow_cell_t>(VISIBLE_FLOW_CELLS, 0) reported_ack;
    Register<bit<32>, flow_cell_t>(VISIBLE_FLOW_CELLS, 0) sent_ack;
    Register<bit<32>, flow_cell_t>(VISIBLE_FLOW_CELLS, 0) hold_since;                 // 0: not holding
    Register<bit<32>, flow_cell_t>(VISIBLE_FLOW_CELLS, 0) retransmits;

    bool enabled = false;        // VISIBLE on in the packet's policy
    bit<32> hold_budget = 0;
    bit<32> slack = 0;           // 32 bits wide so that the shifts below take whole fields
    bit<32> boosts_max = 0;
    bit<8> requests_max = 0;
    bit<32> report_every = 0;
    bool helper_ok = false;
    bit<16> helper_epoch = 0;

    /* The registers' PHV inputs (two per register), each set before the register's stage. */
    bit<32> flow_id;
    bit<32> in_a;                // downlink: seq; uplink: ACK number; confirmation: start of the held range
    bit<32> in_b;                // downlink: seg_end; uplink: the lowest SACK left edge, then forwarded_end's cap
    bit<32> in_c;                // downlink: where copies start; uplink: ACK number, a dup-ACK's boost cap from
                                 // confirmed_end on; confirmation: end of the range
    bit<32> length;              // downlink: payload + SYN + FIN
    bit<32> slack_dups;          // hold_slack and boost_max in burst's units
    bit<32> boost_dups;
    bit<32> hold_stale;          // a hold clock started before this has spent the budget
    bit<32> report_below;        // ACK number - report_bytes: a report at or below it is due again
    /* Results of the registers' actions, 0 where the action does not run. */
    bit<32> target = 0;          // the boosted ACK number
    bit<8> held = 0;
    bit<8> requested = 0;
    bit<8> due = 0;              // a report of the receiver's ACK
    bit<8> owed = 0;
    bit<8> hide = 0;
    bit<8> started = 0;          // copies start with this segment

    action visible_on(bit<16> segment_size, bit<32> hold_budget_us, bit<16> hold_slack, bit<32> boost_max_depth,
                      bit<16> boost_max, bit<8> retransmit_max, bit<8> alpha_shift, bit<8> beta_shift,
                      bit<32> idle_timeout_us, bit<32> report_bytes, bit<1> queue_aware_hold) {
        enabled = true;
        hold_budget = hold_budget_us;
        slack = (bit<32>)hold_slack;
        boosts_max = (bit<32>)boost_max;
        requests_max = retransmit_max;
        report_every = report_bytes;
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
        helper_ok = true;
        helper_epoch = epoch;
    }

    action helper_down() {
        helper_ok = false;
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

    /* The differences whose signs order the SACK edges, in an action of their own: assigned in apply, they would
     * be copied into the conditions, which cannot subtract. */
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

    /* flow_owner: a downlink segment takes its own cell or one idle for VISIBLE_TNA_IDLE_TIMEOUT. */
    RegisterAction<visible_pair_t, flow_cell_t, owner_t>(flow_owner) claim_or_touch = {
        void apply(inout visible_pair_t owner, out owner_t result) {
            if (owner.lo == flow_id) {
                owner.hi = now;
                result = owner_t.SELF;
            } else if (now - owner.hi > VISIBLE_TNA_IDLE_TIMEOUT) {
                owner.lo = flow_id;
                owner.hi = now;
                result = owner_t.CLAIMED;
            } else {
                result = owner_t.OTHER;
            }
        }
    };

    RegisterAction<visible_pair_t, flow_cell_t, owner_t>(flow_owner) touch = {
        void apply(inout visible_pair_t owner, out owner_t result) {
            if (owner.lo == flow_id) {
                owner.hi = now;
                result = owner_t.SELF;
            } else {
                result = owner_t.OTHER;
            }
        }
    };

    RegisterAction<visible_pair_t, flow_cell_t, owner_t>(flow_owner) check_owner = {
        void apply(inout visible_pair_t owner, out owner_t result) {
            if (owner.lo == flow_id) {
                result = owner_t.SELF;
            } else {
                result = owner_t.OTHER;
            }
        }
    };

    /* forwarded_end: every sequence number below end went downlink. */
    RegisterAction<visible_pair_t, flow_cell_t, bit<32>>(forwarded_end) claim_end = {
        void apply(inout visible_pair_t fwd) {
            fwd.lo = in_b;
        }
    };

    RegisterAction<visible_pair_t, flow_cell_t, bit<32>>(forwarded_end) advance_end = {
        void apply(inout visible_pair_t fwd) {
            if (!seq_before(fwd.lo, in_a) && seq_before(fwd.lo, in_b)) {
                fwd.lo = in_b;
            }
        }
    };

    /* The receiver has what it acknowledged, so it went through here. Returns end as it was: the cap. */
    RegisterAction<visible_pair_t, flow_cell_t, bit<32>>(forwarded_end) catch_up_end = {
        void apply(inout visible_pair_t fwd, out bit<32> cap) {
            fwd.hi = fwd.lo;
            if (seq_before(fwd.lo, in_a)) {
                fwd.lo = in_a;
            }
            cap = fwd.hi;
        }
    };

    /* The same, the cap lowered to the lowest SACK left edge. */
    RegisterAction<visible_pair_t, flow_cell_t, bit<32>>(forwarded_end) catch_up_end_sack = {
        void apply(inout visible_pair_t fwd, out bit<32> cap) {
            if (seq_before(in_b, fwd.lo)) {
                fwd.hi = in_b;
            } else {
                fwd.hi = fwd.lo;
            }
            if (seq_before(fwd.lo, in_a)) {
                fwd.lo = in_a;
            }
            cap = fwd.hi;
        }
    };

    /* forwarded_max: the highest sequence number forwarded downlink. */
    RegisterAction<bit<32>, flow_cell_t, bit<32>>(forwarded_max) claim_max = {
        void apply(inout bit<32> highest) {
            highest = in_b;
        }
    };

    /* Returns forwarded_max before the segment: copies start there. */
    RegisterAction<bit<32>, flow_cell_t, bit<32>>(forwarded_max) advance_max = {
        void apply(inout bit<32> highest, out bit<32> before) {
            before = highest;
            if (seq_before(highest, in_b)) {
                highest = in_b;
            }
        }
    };

    /* Returns 1 if data above the ACK number is outstanding. */
    RegisterAction<bit<32>, flow_cell_t, bit<8>>(forwarded_max) catch_up_max = {
        void apply(inout bit<32> highest, out bit<8> outstanding) {
            outstanding = 0;
            if (seq_before(highest, in_a)) {
                highest = in_a;
            }
            if (seq_before(in_a, highest)) {
                outstanding = 1;
            }
        }
    };

    RegisterAction<visible_pair_t, flow_cell_t, window_t>(ack_window) forget_window = {
        void apply(inout visible_pair_t last) {
            last.hi = 0;
        }
    };

    RegisterAction<visible_pair_t, flow_cell_t, window_t>(ack_window) check_window = {
        void apply(inout visible_pair_t last, out window_t result) {
            if (last.hi == 0) {
                result = window_t.FIRST;
            } else if (last.lo == (bit<32>)hdr.wire.tcp.window) {
                result = window_t.SAME;
            } else {
                result = window_t.CHANGED;
            }
            last.lo = (bit<32>)hdr.wire.tcp.window;
            last.hi = 1;
        }
    };

    RegisterAction<visible_pair_t, flow_cell_t, window_t>(ack_window) peek_window = {
        void apply(inout visible_pair_t last, out window_t result) {
            if (last.hi == 0) {
                result = window_t.FIRST;
            } else if (last.lo == (bit<32>)hdr.wire.tcp.window) {
                result = window_t.SAME;
            } else {
                result = window_t.CHANGED;
            }
        }
    };

    /* receiver_ack starts at the claiming segment's sequence number. */
    RegisterAction<visible_pair_t, flow_cell_t, order_t>(receiver_ack) init_ack = {
        void apply(inout visible_pair_t acked) {
            acked.lo = in_a;
        }
    };

    RegisterAction<visible_pair_t, flow_cell_t, order_t>(receiver_ack) order_ack = {
        void apply(inout visible_pair_t acked, out order_t result) {
            if (acked.lo == in_a) {
                result = order_t.SAME;
            } else if (seq_before(acked.lo, in_a)) {
                acked.lo = in_a;
                result = order_t.NEWER;
            } else {
                result = order_t.OTHER;
            }
        }
    };

    RegisterAction<visible_pair_t, flow_cell_t, order_t>(receiver_ack) compare_ack = {
        void apply(inout visible_pair_t acked, out order_t result) {
            if (acked.lo == in_a) {
                result = order_t.SAME;
            } else if (seq_before(acked.lo, in_a)) {
                result = order_t.NEWER;
            } else {
                result = order_t.OTHER;
            }
        }
    };

    /* burst: lo counts the burst's dup-ACKs plus the next one (so that the comparisons need no offset); hi is unused
     * (an enum result comes only from a pair). No EWMA of burst lengths: a stateful ALU compares one register half
     * with the packet, not the two halves with each other (dup-ACKs - EWMA), so the hold limit is hold_slack. */
    RegisterAction<visible_pair_t, flow_cell_t, burst_t>(burst) forget_burst = {
        void apply(inout visible_pair_t b) {
            b.lo = VISIBLE_TNA_DUP;
        }
    };

    /* Counts the dup-ACK: held while dup_acks <= hold_slack, boosted while dup_acks <= boost_max. */
    RegisterAction<visible_pair_t, flow_cell_t, burst_t>(burst) count_dup = {
        void apply(inout visible_pair_t b, out burst_t result) {
            if (b.lo <= slack_dups && b.lo <= boost_dups) {
                result = burst_t.BOTH;
            } else if (b.lo <= slack_dups) {
                result = burst_t.HOLD;
            } else if (b.lo <= boost_dups) {
                result = burst_t.BOOST;
            } else {
                result = burst_t.NONE;
            }
            b.lo = b.lo |+| VISIBLE_TNA_DUP;
        }
    };

    /* A new ACK ends the burst. */
    RegisterAction<visible_pair_t, flow_cell_t, burst_t>(burst) end_burst = {
        void apply(inout visible_pair_t b) {
            b.lo = VISIBLE_TNA_DUP;
        }
    };

    /* copy_state: every byte forwarded from start on was copied to the helper in its epoch. Returns 1 when the
     * copies start here (a new epoch: confirmations of an earlier one may come from a helper that lost them). */
    RegisterAction<visible_pair_t, flow_cell_t, bit<8>>(copy_state) claim_copies = {
        void apply(inout visible_pair_t copies, out bit<8> result) {
            copies.lo = (bit<32>)helper_epoch;
            copies.hi = in_c;
            result = 1;
        }
    };

    RegisterAction<visible_pair_t, flow_cell_t, bit<8>>(copy_state) start_copies = {
        void apply(inout visible_pair_t copies, out bit<8> result) {
            result = 0;
            if (copies.lo != (bit<32>)helper_epoch) {
                copies.lo = (bit<32>)helper_epoch;
                copies.hi = in_c;
                result = 1;
            }
        }
    };

    RegisterAction<visible_pair_t, flow_cell_t, bit<8>>(copy_state) forget_copies = {
        void apply(inout visible_pair_t copies) {
            copies.lo = 0;
        }
    };

    /* Returns 1 if the copies belong to the helper's epoch and start at or below in_c. */
    RegisterAction<visible_pair_t, flow_cell_t, bit<8>>(copy_state) check_copies = {
        void apply(inout visible_pair_t copies, out bit<8> covered) {
            covered = 0;
            if (copies.lo == (bit<32>)helper_epoch && !seq_before(in_c, copies.hi)) {
                covered = 1;
            }
        }
    };

    /* confirmed_end: the helper confirmed copies from the receiver's ACK up to here. */
    RegisterAction<visible_pair_t, flow_cell_t, bit<32>>(confirmed_end) reset_confirmed = {
        void apply(inout visible_pair_t confirmed) {
            confirmed.lo = in_c;
        }
    };

    /* Returns 1 when the confirmed range's end (in_c) moved confirmed_end. */
    RegisterAction<visible_pair_t, flow_cell_t, bit<32>>(confirmed_end) confirm = {
        void apply(inout visible_pair_t confirmed, out bit<32> moved) {
            moved = 0;
            if (seq_before(confirmed.lo, in_c)) {
                confirmed.lo = in_c;
                moved = 1;
            }
        }
    };

    /* Returns the boost cap: forwarded_end's cap, lowered to confirmed_end. */
    RegisterAction<visible_pair_t, flow_cell_t, bit<32>>(confirmed_end) cap_confirmed = {
        void apply(inout visible_pair_t confirmed, out bit<32> cap) {
            if (seq_before(confirmed.lo, in_b)) {
                confirmed.hi = confirmed.lo;
            } else {
                confirmed.hi = in_b;
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
            if (!seq_before(report_below, reported)) {
                reported = in_a;
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
            if ((int<32>)(sent - in_c) < -VISIBLE_TNA_BOOST_BYTES) {
                sent = sent + VISIBLE_TNA_BOOST_BYTES;
                result = sent;
            } else if (seq_before(sent, in_c)) {
                sent = in_c;
                result = sent;
            }
        }
    };

    /* A new ACK (in_c). Returns 1 if the sender was sent a higher one: the switch owes it those bytes. */
    RegisterAction<bit<32>, flow_cell_t, bit<8>>(sent_ack) advance_sent = {
        void apply(inout bit<32> sent, out bit<8> owing) {
            owing = 0;
            if (seq_before(sent, in_c)) {
                sent = in_c;
            } else if (seq_before(in_c, sent)) {
                owing = 1;
            }
        }
    };

    RegisterAction<bit<32>, flow_cell_t, bit<32>>(sent_ack) first_sent = {
        void apply(inout bit<32> sent) {
            sent = in_c;
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
            } else if (seq_before(hold_stale, since)) {
                result = 1;
            }
        }
    };

    /* A new ACK that may hide its SACK blocks: returns 1 if the burst stayed within the budget, whose clock then
     * starts for the next hole. */
    RegisterAction<bit<32>, flow_cell_t, bit<8>>(hold_since) end_hold_hide = {
        void apply(inout bit<32> since, out bit<8> result) {
            result = 0;
            if (since == 0 || seq_before(hold_stale, since)) {
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
            if (requests < (bit<32>)requests_max) {
                requests = requests + 1;
                result = 1;
            }
        }
    };

    apply {
        tcp_rewritten = false;
        /* Everything that needs only the packet first, in parallel: the key, the parameters, the helper. */
        flow_id = key_hash.get({hdr.wire.ipv4.src_addr, hdr.wire.ipv4.dst_addr,
                                hdr.wire.tcp.src_port, hdr.wire.tcp.dst_port});
        flow_cell_t cell = flow_id[VISIBLE_FLOW_INDEX_BITS - 1:0];
        params.apply();
        helper.apply();
        /* Booleans are set in if statements: Tofino's actions move values, its gateways compare. */
        bool helper_copies = false;
        if (helper_ok && helper_epoch != 0) {
            helper_copies = true;
        }

        /* A Counter runs once per packet on Tofino: each packet counts its most specific decision, in exclusive
         * branches. A confirmation needs only the helper's state; the other packets need VISIBLE on in their
         * policy. */
        if (hdr.helper.isValid()) {
            dprsr_md.drop_ctl = 1;
            /* The helper holds copies from the inner TCP header's sequence number to its ACK number; the range
             * counts if it starts within what the receiver acknowledged (no gap). */
            in_a = hdr.wire.tcp.seq_no;
            in_c = hdr.wire.tcp.ack_no;
            if (check_owner.execute(cell) == owner_t.SELF) {
                window_t seen = peek_window.execute(cell);
                order_t start = compare_ack.execute(cell);
                bit<8> copies = check_copies.execute(cell);
                if (helper_copies && seen != window_t.FIRST && start != order_t.NEWER && copies == 1) {
                    if (confirm.execute(cell) == 1) {
                        decisions.count(VISIBLE_COPIES_CONFIRMED);
                    }
                }
            }
        } else if (enabled && md.lwip && !md.injected && hdr.wire.tcp.isValid()) {
            in_a = hdr.wire.tcp.seq_no;
            /* seg_end (in_b) = seq + length, the length (payload + SYN + FIN) added in a later action: an action
             * adds once, and the compiler merges an addition into a later one that only a gateway separates. */
            if ((hdr.wire.tcp.flags & (TCP_FLAG_SYN | TCP_FLAG_FIN)) == (TCP_FLAG_SYN | TCP_FLAG_FIN)) {
                length = (bit<32>)md.tcp_payload_bytes + 2;
            } else if ((hdr.wire.tcp.flags & (TCP_FLAG_SYN | TCP_FLAG_FIN)) != 0) {
                length = (bit<32>)md.tcp_payload_bytes + 1;
            } else {
                length = (bit<32>)md.tcp_payload_bytes;
            }
            in_b = hdr.wire.tcp.seq_no + length;
            /* A policy that neither boosts nor retransmits (hold only) needs no copies. */
            bool policy_copies = false;
            if (boosts_max != 0) {
                policy_copies = true;
            } else if (requests_max != 0) {
                policy_copies = true;
            }
            bool copying = false;
            if ((md.tcp_payload_bytes != 0 || (hdr.wire.tcp.flags & (TCP_FLAG_SYN | TCP_FLAG_FIN)) != 0)
                    && policy_copies && helper_copies) {
                copying = true;
            }

            owner_t owner = claim_or_touch.execute(cell);
            if (owner == owner_t.OTHER) {
                decisions.count(VISIBLE_UNTRACKED);
            } else {
                /* In the registers' stage order: Tofino 1 runs a control block's tables in program order. */
                if (owner == owner_t.CLAIMED) {
                    claim_end.execute(cell);
                    claim_max.execute(cell);
                    forget_window.execute(cell);
                    init_ack.execute(cell);
                    in_c = hdr.wire.tcp.seq_no;
                } else {
                    advance_end.execute(cell);
                    in_c = advance_max.execute(cell);
                }
                if (owner == owner_t.CLAIMED) {
                    forget_burst.execute(cell);
                    if (copying) {
                        started = claim_copies.execute(cell);
                    } else {
                        forget_copies.execute(cell);
                    }
                } else if (copying) {
                    started = start_copies.execute(cell);
                }
                if (started == 1) {
                    reset_confirmed.execute(cell);
                }
                if (owner == owner_t.CLAIMED) {
                    forget_reported.execute(cell);
                    clear_hold.execute(cell);
                    reset_requests.execute(cell);
                }
                if (copying) {
                    to_helper(HELPER_DATA_COPY);
                    decisions.count(VISIBLE_DATA_COPIED);
                } else {
                    decisions.count(VISIBLE_DATA_TRACKED);
                }
            }
        } else if (enabled && (md.role == ROLE_LTE || md.role == ROLE_WIFI) && !md.injected && hdr.wire.tcp.isValid()
                   && (hdr.wire.tcp.flags & TCP_FLAG_ACK) != 0) {
            in_a = hdr.wire.tcp.ack_no;
            in_c = hdr.wire.tcp.ack_no;
            sack_differences();
            /* Flags that do not depend on the registers, set while the key is hashed: a flag set from a
             * register's result costs a stage before the gateway that reads it, so those are tested directly. */
            bool sack = false;
            if (hdr.sack_blocks[0].isValid()) {
                sack = true;
            }
            /* The lowest SACK left edge (in_b) and D-SACK (RFC 2883: a first block below the ACK number, or
             * inside the second block) from the signs of differences: a gateway compares with constants only. */
            if (hdr.sack_blocks[2].isValid() && d12[31:31] == 0 && d02[31:31] == 0) {
                in_b = hdr.sack_blocks[2].left_edge;
            } else if (hdr.sack_blocks[1].isValid() && d01[31:31] == 0) {
                in_b = hdr.sack_blocks[1].left_edge;
            } else {
                in_b = hdr.sack_blocks[0].left_edge;
            }
            bool dsack = false;
            if (sack && below_ack[31:31] == 1) {
                dsack = true;
            } else if (hdr.sack_blocks[1].isValid() && d01[31:31] == 0 && right_inside[31:31] == 0) {
                dsack = true;
            }
            bool pure = false;
            if (md.tcp_payload_bytes == 0 && (hdr.wire.tcp.flags & (TCP_FLAG_SYN | TCP_FLAG_FIN | TCP_FLAG_RST)) == 0) {
                pure = true;
            }
            /* Options the switch can read all of: none, timestamps only, or timestamps and SACK blocks. */
            bool timestamps = false;
            if (hdr.tcp_timestamps.isValid() && hdr.tcp_timestamps.nop1 == TCP_OPTION_NOP
                    && hdr.tcp_timestamps.nop2 == TCP_OPTION_NOP && hdr.tcp_timestamps.kind == TCP_OPTION_TIMESTAMPS
                    && hdr.tcp_timestamps.length == TCP_OPTION_TIMESTAMPS_LENGTH) {
                timestamps = true;
            }
            bool boost_options = false;
            if (hdr.wire.tcp.data_offset == TCP_DATA_OFFSET_MIN) {
                boost_options = helper_copies;
            } else if (timestamps && (hdr.wire.tcp.data_offset == TCP_DATA_OFFSET_TIMESTAMPS || sack)) {
                boost_options = helper_copies;
            }
            bool hide_options = false;
            if (hold_budget != 0 && sack && !dsack) {
                hide_options = true;
            }
            /* Hold budget, dup-ACK limits and boost step as the stateful ALUs compare and add them. */
            hold_stale = now - hold_budget;
            report_below = hdr.wire.tcp.ack_no - report_every;
            slack_dups = slack << VISIBLE_EWMA_FRACTION_BITS;
            boost_dups = boosts_max << VISIBLE_EWMA_FRACTION_BITS;

            if (touch.execute(cell) != owner_t.SELF) {
                decisions.count(VISIBLE_UNTRACKED);
            } else {
                if (sack) {
                    in_b = catch_up_end_sack.execute(cell);
                } else {
                    in_b = catch_up_end.execute(cell);
                }
                bit<8> outstanding = catch_up_max.execute(cell);
                window_t seen = check_window.execute(cell);
                order_t order = order_ack.execute(cell);
                bit<8> copies = check_copies.execute(cell);

                /* RFC 5681's dup-ACK; an ACK with SACK blocks counts whatever its window. A register's action
                 * takes no constants along (its index comes through the hash unit, a keyless table's constants
                 * through the miss path): decisions are set behind gateways of their own. */
                if (seen != window_t.FIRST && order == order_t.SAME && pure && outstanding == 1
                        && (seen == window_t.SAME || sack)) {
                    burst_t allows = count_dup.execute(cell);
                    if (boost_options && copies == 1 && (allows == burst_t.BOOST || allows == burst_t.BOTH)) {
                        in_c = cap_confirmed.execute(cell);
                        target = boost.execute(cell);
                    }
                    if (target != 0) {
                        restart_hold.execute(cell);
                    } else {
                        if (!dsack && (allows == burst_t.HOLD || allows == burst_t.BOTH)) {
                            held = hold_dup.execute(cell);
                        }
                        if (held == 0 && helper_copies && copies == 1) {
                            requested = request.execute(cell);
                        }
                    }
                    if (target != 0) {
                        hdr.wire.tcp.ack_no = target;
                        tcp_rewritten = true;
                        decisions.count(VISIBLE_BOOSTED);
                    } else if (held == 1) {
                        dprsr_md.drop_ctl = 1;
                        decisions.count(VISIBLE_HELD);
                    } else if (requested == 1) {
                        to_helper(HELPER_RETRANSMIT);
                        decisions.count(VISIBLE_RETRANSMIT_REQUESTED);
                    } else {
                        decisions.count(VISIBLE_DUP_ACK_FORWARDED);
                    }
                } else if (seen == window_t.FIRST || order == order_t.NEWER) {
                    end_burst.execute(cell);
                    if (helper_copies && copies == 1) {
                        due = report.execute(cell);
                    }
                    if (seen == window_t.FIRST) {
                        first_sent.execute(cell);
                    } else {
                        owed = advance_sent.execute(cell);
                    }
                    /* Hidden while the burst it ends stayed within the hold budget and nothing is owed. */
                    if (seen != window_t.FIRST && hide_options && !(owed == 1 && helper_ok)) {
                        hide = end_hold_hide.execute(cell);
                    } else {
                        clear_hold.execute(cell);
                    }
                    if (owed == 1 && helper_ok) {
                        owe_request.execute(cell);
                    } else {
                        reset_requests.execute(cell);
                    }
                    if (hide == 1) {
                        sack_to_nops();
                        tcp_rewritten = true;
                    }
                    if (owed == 1 && helper_ok) {
                        to_helper(HELPER_RETRANSMIT);
                        decisions.count(VISIBLE_RETRANSMIT_REQUESTED);
                    } else if (due == 1) {
                        to_helper(HELPER_ACK_REPORT);
                        decisions.count(VISIBLE_ACK_REPORTED);
                    } else if (hide == 1) {
                        decisions.count(VISIBLE_SACK_HIDDEN);
                    } else {
                        decisions.count(VISIBLE_NEW_ACK);
                    }
                }
            }
        }
    }
}

#endif  // TNG_TNA_VISIBLE_P4
