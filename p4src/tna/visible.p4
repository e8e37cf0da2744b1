/*
 * TNA: VISIBLE on the TCP ACKs of steered downlink flows, v1model/visible.p4's state machine restructured for
 * Tofino's stateful ALUs. Tofino lets a packet run at most one RegisterAction per register, in one stage, on a cell
 * of at most two 32-bit halves, so the per-flow state is split into registers ordered by what each decision needs:
 * every register below reads only its own cell and values that registers above it (or tables) produced, and writes
 * its cell in the same action. The decisions that v1model makes from all of a flow's state at once are made in the
 * register that holds the state they change, from flags computed above it.
 *
 *   flow_owner     {key, last_seen}        claim / touch the cell (key: CRC-32 of the direction-symmetric 4-tuple)
 *   forwarded      {end, max}              forwarded_end / forwarded_max of v1model
 *   copy_state     {epoch, start}          copy_epoch / copy_start: is the receiver's ACK covered by copies?
 *   ack_state      {receiver_ack, window}  classifies an ACK: dup-ACK, new ACK, other (window bit 16: ack_seen)
 *   confirmed_end                          the helper confirmed copies up to here
 *   burst          {dup_acks, ewma}        dup-ACK count of the burst, EWMA of burst lengths; "may hold" flag
 *   sent           {sent_ack, reported}    boosts the ACK number; on a new ACK: owed bytes or report due
 *   hold           {hold_time, hold_since} holds a dup-ACK within the budget; on a new ACK: hides SACK blocks
 *   retransmits                            retransmission requests of the burst
 *
 * What this gives up against v1model (docs/tofino.md): the queue-depth guard on boosts and the queue term of the hold
 * budget (queue_aware_hold is ignored: egress queue depths are not readable in ingress), boosts of one segment_size per dup-ACK rather than segment_size x dup-ACKs (no multiplier),
 * boosts capped by forwarded_max rather than forwarded_end, the EWMA shifts fixed at compile time (alpha_shift and
 * beta_shift are ignored), the repeated requests for owed bytes on dup-ACKs and the "stalled sender" request (only the
 * new-ACK request for owed bytes remains), and holds after a retransmission request of the same burst are not
 * excluded. An uplink ACK takes its VISIBLE parameters from its own classification (md.policy), not from the data
 * direction's stored per flow: the controller gives both directions of a VISIBLE flow the same policy.
 * Times are in units of 256 ns ("us" in parameter names), compared modulo 2^32.
 */
#ifndef TNG_TNA_VISIBLE_P4
#define TNG_TNA_VISIBLE_P4

#include <core.p4>
#include <tna.p4>

#include "shared/arith.p4"
#include "shared/pipeline_header.p4"
#include "shared/size.p4"

/* The EWMA of dup-ACK burst lengths moves up by 2^-VISIBLE_TNA_ALPHA_SHIFT and down by 2^-VISIBLE_TNA_BETA_SHIFT of
 * the difference: a stateful ALU shifts by constants only. */
#define VISIBLE_TNA_ALPHA_SHIFT 2
#define VISIBLE_TNA_BETA_SHIFT 4

typedef bit<VISIBLE_FLOW_INDEX_BITS> flow_cell_t;

struct flow_owner_t {
    bit<32> key;
    bit<32> last_seen;
}

struct forwarded_t {
    bit<32> end;
    bit<32> max;
}

struct copy_state_t {
    bit<32> epoch;
    bit<32> start;
}

struct ack_state_t {
    bit<32> receiver_ack;
    bit<32> window;  // receiver_window | ACK_STATE_VALID
}

struct burst_t {
    bit<32> dup_acks;
    bit<32> ewma;  // VISIBLE_EWMA_FRACTION_BITS fractional bits
}

struct sent_t {
    bit<32> sent_ack;
    bit<32> reported_ack;
}

struct hold_t {
    bit<32> hold_time;
    bit<32> hold_since;  // 0: not holding
}

const bit<32> ACK_STATE_VALID = 0x10000;

/* flow_owner results. */
const bit<8> OWNER_OTHER = 0;    // held by another flow (or free, for an ACK)
const bit<8> OWNER_SELF = 1;
const bit<8> OWNER_CLAIMED = 2;  // a downlink segment took the cell

/* ack_state results. */
const bit<8> ACK_OTHER = 0;
const bit<8> ACK_DUP = 1;
const bit<8> ACK_NEW = 2;
const bit<8> ACK_FIRST = 3;  // the first ACK of the flow: new, nothing known before it

/* sent results on a new ACK. */
const bit<8> SENT_NOTHING = 0;
const bit<8> SENT_OWED = 1;     // the receiver still lacks bytes the switch acknowledged: request them
const bit<8> SENT_REPORT = 2;   // report the receiver's ACK to the helper

const bit<8> NO_DECISION = 0xff;

control Visible(inout tng_headers_t hdr,
                inout tng_metadata_t md,
                in ingress_intrinsic_metadata_t ig_intr_md,
                inout ingress_intrinsic_metadata_for_deparser_t dprsr_md,
                in bit<32> now,
                out bool tcp_rewritten) {
    Counter<bit<64>, bit<8>>(VISIBLE_DECISION_COUNT, CounterType_t.PACKETS) decisions;
    Hash<bit<32>>(HashAlgorithm_t.CRC32) key_hash;

    Register<flow_owner_t, flow_cell_t>(VISIBLE_FLOW_CELLS, {0, 0}) flow_owner;
    Register<forwarded_t, flow_cell_t>(VISIBLE_FLOW_CELLS, {0, 0}) forwarded;
    Register<copy_state_t, flow_cell_t>(VISIBLE_FLOW_CELLS, {0, 0}) copy_state;
    Register<ack_state_t, flow_cell_t>(VISIBLE_FLOW_CELLS, {0, 0}) ack_state;
    Register<bit<32>, flow_cell_t>(VISIBLE_FLOW_CELLS, 0) confirmed_end;
    Register<burst_t, flow_cell_t>(VISIBLE_FLOW_CELLS, {0, 0}) burst;
    Register<sent_t, flow_cell_t>(VISIBLE_FLOW_CELLS, {0, 0}) sent;
    Register<hold_t, flow_cell_t>(VISIBLE_FLOW_CELLS, {0, 0}) hold;
    Register<bit<32>, flow_cell_t>(VISIBLE_FLOW_CELLS, 0) retransmits;

    bit<16> mss = 0;
    bit<32> hold_budget = 0;
    bit<16> slack = 0;
    bit<16> boosts_max = 0;
    bit<8> requests_max = 0;
    bit<32> idle_timeout = 0;
    bit<32> report_every = 0;
    bool helper_ok = false;
    bit<16> helper_epoch = 0;

    /* Per-packet inputs of the register actions, computed before them. */
    bit<32> flow_id = 0;
    bit<32> seq = 0;
    bit<32> seg_end = 0;
    bit<32> ack = 0;
    bit<32> window = 0;
    bool claimed = false;
    bool copying = false;
    bit<32> copied_from = 0;
    bool pure = false;
    bool sack = false;
    bool outstanding = false;
    bool may_boost = false;
    bit<32> boost_cap = 0;
    bool may_hold = false;
    bool hide_candidate = false;
    bool owing = false;
    bool boosted = false;
    bool covered = false;

    action visible_on(bit<16> segment_size, bit<32> hold_budget_us, bit<16> hold_slack, bit<32> boost_max_depth,
                      bit<16> boost_max, bit<8> retransmit_max, bit<8> alpha_shift, bit<8> beta_shift,
                      bit<32> idle_timeout_us, bit<32> report_bytes, bit<1> queue_aware_hold) {
        mss = segment_size;
        hold_budget = hold_budget_us;
        slack = hold_slack;
        boosts_max = boost_max;
        requests_max = retransmit_max;
        idle_timeout = idle_timeout_us;
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

    /* v1model: clone_preserving_field_list to HELPER_CLONE_SESSION; here the ingress deparser mirrors. */
    @hidden
    action to_helper(helper_reason_t reason) {
        md.helper_reason = reason;
        md.helper_ingress_port = ig_intr_md.ingress_port;
        dprsr_md.mirror_type = MIRROR_TYPE_HELPER;
    }

    /* flow_owner: a downlink segment takes a free cell, its own, or one idle for longer than idle_timeout. */
    RegisterAction<flow_owner_t, flow_cell_t, bit<8>>(flow_owner) claim_or_touch = {
        void apply(inout flow_owner_t owner, out bit<8> result) {
            if (owner.key == flow_id) {
                owner.last_seen = now;
                result = OWNER_SELF;
            } else if (owner.key == 0 || now - owner.last_seen > idle_timeout) {
                owner.key = flow_id;
                owner.last_seen = now;
                result = OWNER_CLAIMED;
            } else {
                result = OWNER_OTHER;
            }
        }
    };

    RegisterAction<flow_owner_t, flow_cell_t, bit<8>>(flow_owner) touch = {
        void apply(inout flow_owner_t owner, out bit<8> result) {
            result = OWNER_OTHER;
            if (owner.key == flow_id) {
                owner.last_seen = now;
                result = OWNER_SELF;
            }
        }
    };

    RegisterAction<flow_owner_t, flow_cell_t, bit<8>>(flow_owner) peek_owner = {
        void apply(inout flow_owner_t owner, out bit<8> result) {
            result = owner.key == flow_id ? OWNER_SELF : OWNER_OTHER;
        }
    };

    /* forwarded: returns forwarded_max before the segment (copies start there). */
    RegisterAction<forwarded_t, flow_cell_t, bit<32>>(forwarded) forward_segment = {
        void apply(inout forwarded_t fwd, out bit<32> highest_before) {
            bit<32> contiguous = claimed ? seq : fwd.end;
            bit<32> highest = claimed ? seq : fwd.max;
            highest_before = highest;
            if (!seq_before(contiguous, seq) && seq_before(contiguous, seg_end)) {
                contiguous = seg_end;
            }
            fwd.end = contiguous;
            fwd.max = seq_before(highest, seg_end) ? seg_end : highest;
        }
    };

    /* What the receiver acknowledged went through the switch. Returns forwarded_max. */
    RegisterAction<forwarded_t, flow_cell_t, bit<32>>(forwarded) catch_up = {
        void apply(inout forwarded_t fwd, out bit<32> highest) {
            bit<32> contiguous = seq_before(fwd.end, ack) ? ack : fwd.end;
            fwd.end = contiguous;
            fwd.max = seq_before(fwd.max, contiguous) ? contiguous : fwd.max;
            highest = fwd.max;
        }
    };

    /* copy_state on a copied segment: a new epoch starts its copies here. Returns 1 when it did. */
    RegisterAction<copy_state_t, flow_cell_t, bit<8>>(copy_state) start_copies = {
        void apply(inout copy_state_t copies, out bit<8> new_epoch) {
            new_epoch = 0;
            if (claimed || copies.epoch != (bit<32>)helper_epoch) {
                copies.epoch = (bit<32>)helper_epoch;
                copies.start = copied_from;
                new_epoch = 1;
            }
        }
    };

    RegisterAction<copy_state_t, flow_cell_t, bit<8>>(copy_state) forget_copies = {
        void apply(inout copy_state_t copies) {
            copies.epoch = 0;
        }
    };

    /* Bit 0: the copies belong to the helper's epoch; bit 1: they also cover the ACK number. */
    RegisterAction<copy_state_t, flow_cell_t, bit<8>>(copy_state) check_copies = {
        void apply(inout copy_state_t copies, out bit<8> state) {
            if (copies.epoch == (bit<32>)helper_epoch && !seq_before(ack, copies.start)) {
                state = 3;
            } else if (copies.epoch == (bit<32>)helper_epoch) {
                state = 1;
            } else {
                state = 0;
            }
        }
    };

    RegisterAction<ack_state_t, flow_cell_t, bit<8>>(ack_state) forget_ack = {
        void apply(inout ack_state_t acks) {
            acks.window = 0;
        }
    };

    /* RFC 5681's dup-ACK (an ACK with SACK blocks counts whatever its window), a new ACK, or other. */
    RegisterAction<ack_state_t, flow_cell_t, bit<8>>(ack_state) classify_ack = {
        void apply(inout ack_state_t acks, out bit<8> kind) {
            bool valid = (acks.window & ACK_STATE_VALID) != 0;
            if (valid && pure && outstanding && ack == acks.receiver_ack
                    && ((acks.window & 0xffff) == window || sack)) {
                acks.window = window | ACK_STATE_VALID;
                kind = ACK_DUP;
            } else if (!valid) {
                acks.receiver_ack = ack;
                acks.window = window | ACK_STATE_VALID;
                kind = ACK_FIRST;
            } else if (seq_before(acks.receiver_ack, ack)) {
                acks.receiver_ack = ack;
                acks.window = window | ACK_STATE_VALID;
                kind = ACK_NEW;
            } else {
                if (ack == acks.receiver_ack) {
                    acks.window = window | ACK_STATE_VALID;
                }
                kind = ACK_OTHER;
            }
        }
    };

    /* A confirmation counts if the receiver's ACK lies inside the confirmed range (seq = its start). */
    RegisterAction<ack_state_t, flow_cell_t, bit<8>>(ack_state) ack_within = {
        void apply(inout ack_state_t acks, out bit<8> within) {
            within = (acks.window & ACK_STATE_VALID) != 0 && !seq_before(acks.receiver_ack, seq) ? 8w1 : 8w0;
        }
    };

    RegisterAction<bit<32>, flow_cell_t, bit<32>>(confirmed_end) reset_confirmed = {
        void apply(inout bit<32> confirmed) {
            confirmed = copied_from;
        }
    };

    /* ack holds the confirmed range's end. Returns 1 when it moved confirmed_end. */
    RegisterAction<bit<32>, flow_cell_t, bit<32>>(confirmed_end) confirm = {
        void apply(inout bit<32> confirmed, out bit<32> moved) {
            moved = 0;
            if (seq_before(confirmed, ack)) {
                confirmed = ack;
                moved = 1;
            }
        }
    };

    RegisterAction<bit<32>, flow_cell_t, bit<32>>(confirmed_end) read_confirmed = {
        void apply(inout bit<32> confirmed, out bit<32> value) {
            value = confirmed;
        }
    };

    RegisterAction<burst_t, flow_cell_t, bit<32>>(burst) forget_burst = {
        void apply(inout burst_t b) {
            b.dup_acks = 0;
            b.ewma = 0;
        }
    };

    /* Returns the burst's dup-ACK count, bit 31 set if the burst is still short enough to hold
     * (dups <= hold_slack + EWMA). */
    RegisterAction<burst_t, flow_cell_t, bit<32>>(burst) count_dup = {
        void apply(inout burst_t b, out bit<32> dups_and_may_hold) {
            bit<32> dups = b.dup_acks == 0xffff ? b.dup_acks : b.dup_acks + 1;
            b.dup_acks = dups;
            if ((dups << VISIBLE_EWMA_FRACTION_BITS) <= ((bit<32>)slack << VISIBLE_EWMA_FRACTION_BITS) + b.ewma) {
                dups_and_may_hold = dups | 0x80000000;
            } else {
                dups_and_may_hold = dups;
            }
        }
    };

    RegisterAction<burst_t, flow_cell_t, bit<32>>(burst) end_burst = {
        void apply(inout burst_t b) {
            bit<32> sample = b.dup_acks << VISIBLE_EWMA_FRACTION_BITS;
            if (b.dup_acks != 0) {
                if (sample > b.ewma) {
                    b.ewma = b.ewma + ((sample - b.ewma) >> VISIBLE_TNA_ALPHA_SHIFT);
                } else {
                    b.ewma = b.ewma - ((b.ewma - sample) >> VISIBLE_TNA_BETA_SHIFT);
                }
            }
            b.dup_acks = 0;
        }
    };

    RegisterAction<sent_t, flow_cell_t, bit<32>>(sent) forget_sent = {
        void apply(inout sent_t s) {
            s.reported_ack = 0;
        }
    };

    /* Returns the boosted ACK number, 0 if the dup-ACK is not boosted. */
    RegisterAction<sent_t, flow_cell_t, bit<32>>(sent) boost = {
        void apply(inout sent_t s, out bit<32> target) {
            bit<32> step = s.sent_ack + (bit<32>)mss;
            bit<32> to = seq_before(boost_cap, step) ? boost_cap : step;
            target = 0;
            if (seq_before(s.sent_ack, to)) {
                s.sent_ack = to;
                target = to;
            }
        }
    };

    /* A new ACK (first: nothing sent before it). */
    RegisterAction<sent_t, flow_cell_t, bit<8>>(sent) advance_sent = {
        void apply(inout sent_t s, out bit<8> next) {
            bit<32> sent_now = seq_before(s.sent_ack, ack) ? ack : s.sent_ack;
            s.sent_ack = sent_now;
            next = SENT_NOTHING;
            if (helper_ok && seq_before(ack, sent_now)) {
                s.reported_ack = ack;
                next = SENT_OWED;
            } else if (covered && ack - s.reported_ack >= report_every) {
                s.reported_ack = ack;
                next = SENT_REPORT;
            }
        }
    };

    RegisterAction<sent_t, flow_cell_t, bit<8>>(sent) first_sent = {
        void apply(inout sent_t s, out bit<8> next) {
            s.sent_ack = ack;
            next = SENT_NOTHING;
            if (covered && ack - s.reported_ack >= report_every) {
                s.reported_ack = ack;
                next = SENT_REPORT;
            }
        }
    };

    RegisterAction<hold_t, flow_cell_t, bit<8>>(hold) forget_hold = {
        void apply(inout hold_t h) {
            h.hold_time = 0;
            h.hold_since = 0;
        }
    };

    /* A dup-ACK: a boost starts the hold clock; otherwise it is held while the budget lasts. Returns 1 if held. */
    RegisterAction<hold_t, flow_cell_t, bit<8>>(hold) hold_dup = {
        void apply(inout hold_t h, out bit<8> held) {
            held = 0;
            if (boosted) {
                h.hold_time = 0;
                h.hold_since = now;
            } else if (may_hold && h.hold_time < hold_budget) {
                bit<32> since = h.hold_since == 0 ? now : h.hold_since;
                h.hold_time = h.hold_time + (now - since);
                h.hold_since = now;
                held = 1;
            }
        }
    };

    /* A new ACK ends the burst; returns 1 if its SACK blocks are to be hidden (the burst stayed within budget). */
    RegisterAction<hold_t, flow_cell_t, bit<8>>(hold) end_hold = {
        void apply(inout hold_t h, out bit<8> hide) {
            hide = 0;
            if (hide_candidate && h.hold_time < hold_budget) {
                hide = 1;
                h.hold_since = now;
            } else {
                h.hold_since = 0;
            }
            h.hold_time = 0;
        }
    };

    RegisterAction<bit<32>, flow_cell_t, bit<32>>(retransmits) forget_requests = {
        void apply(inout bit<32> requests) {
            requests = 0;
        }
    };

    /* Returns 1 if the dup-ACK goes to the helper as a request. */
    RegisterAction<bit<32>, flow_cell_t, bit<32>>(retransmits) request = {
        void apply(inout bit<32> requests, out bit<32> requested) {
            requested = 0;
            if (covered && requests < (bit<32>)requests_max) {
                requests = requests + 1;
                requested = 1;
            }
        }
    };

    RegisterAction<bit<32>, flow_cell_t, bit<32>>(retransmits) new_burst_requests = {
        void apply(inout bit<32> requests) {
            requests = owing ? 32w1 : 32w0;
        }
    };

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

    apply {
        tcp_rewritten = false;
        /* A Counter runs once per packet on Tofino: each packet counts its most specific decision only. */
        bit<8> decision = NO_DECISION;
        bool downlink = md.lwip && !md.injected && hdr.wire.tcp.isValid();
        bool uplink = (md.role == ROLE_LTE || md.role == ROLE_WIFI) && !md.injected && hdr.wire.tcp.isValid()
                      && (hdr.wire.tcp.flags & TCP_FLAG_ACK) != 0;
        bool confirmation = hdr.helper.isValid();
        if (confirmation) {
            dprsr_md.drop_ctl = 1;
        }
        if (!(downlink || uplink || confirmation)) {
            return;
        }
        /* A confirmation needs only the helper's state; the other packets need VISIBLE on in their policy. */
        if (!confirmation) {
            if (params.apply().miss) {
                return;
            }
        }
        helper.apply();

        /* The same key for both directions: lower address (then port) first. */
        ipv4_addr_t addr_a = hdr.wire.ipv4.src_addr;
        ipv4_addr_t addr_b = hdr.wire.ipv4.dst_addr;
        l4_port_t port_a = hdr.wire.tcp.src_port;
        l4_port_t port_b = hdr.wire.tcp.dst_port;
        if (addr_b < addr_a || (addr_b == addr_a && port_b < port_a)) {
            addr_a = hdr.wire.ipv4.dst_addr;
            addr_b = hdr.wire.ipv4.src_addr;
            port_a = hdr.wire.tcp.dst_port;
            port_b = hdr.wire.tcp.src_port;
        }
        flow_id = key_hash.get({addr_a, addr_b, port_a, port_b});
        if (flow_id == 0) {
            flow_id = 1;  // 0 marks a free cell
        }
        flow_cell_t cell = flow_id[VISIBLE_FLOW_INDEX_BITS - 1:0];
        seq = hdr.wire.tcp.seq_no;
        ack = hdr.wire.tcp.ack_no;
        window = (bit<32>)hdr.wire.tcp.window;

        if (downlink) {
            bit<8> owner = claim_or_touch.execute(cell);
            if (owner == OWNER_OTHER) {
                decisions.count(VISIBLE_UNTRACKED);
                return;
            }
            claimed = owner == OWNER_CLAIMED;
            bit<32> length = (bit<32>)md.tcp_payload_bytes;
            if ((hdr.wire.tcp.flags & TCP_FLAG_SYN) != 0) {
                length = length + 1;
            }
            if ((hdr.wire.tcp.flags & TCP_FLAG_FIN) != 0) {
                length = length + 1;
            }
            seg_end = seq + length;
            copied_from = forward_segment.execute(cell);
            decision = VISIBLE_DATA_TRACKED;
            copying = length > 0 && helper_ok && helper_epoch != 0 && (boosts_max != 0 || requests_max != 0);
            bit<8> new_epoch = 0;
            if (copying) {
                new_epoch = start_copies.execute(cell);
            } else if (claimed) {
                forget_copies.execute(cell);
            }
            if (claimed) {
                forget_ack.execute(cell);
            }
            if (new_epoch == 1) {
                reset_confirmed.execute(cell);
            }
            if (claimed) {
                forget_burst.execute(cell);
                forget_sent.execute(cell);
                forget_hold.execute(cell);
                forget_requests.execute(cell);
            }
            if (copying) {
                to_helper(HELPER_DATA_COPY);
                decision = VISIBLE_DATA_COPIED;
            }
        } else if (confirmation) {
            if (peek_owner.execute(cell) != OWNER_SELF) {
                return;
            }
            ack = hdr.wire.tcp.ack_no;  // the end of the range the helper holds
            bit<8> copies = check_copies.execute(cell);
            bit<8> within = ack_within.execute(cell);
            if (helper_ok && helper_epoch != 0 && copies != 0 && within == 1) {
                if (confirm.execute(cell) == 1) {
                    decision = VISIBLE_COPIES_CONFIRMED;
                }
            }
        } else {
            bit<8> owner = touch.execute(cell);
            if (owner != OWNER_SELF) {
                decisions.count(VISIBLE_UNTRACKED);
                return;
            }
            bit<32> highest = catch_up.execute(cell);
            bit<8> copies = check_copies.execute(cell);
            covered = helper_ok && helper_epoch != 0 && copies == 3;
            pure = md.tcp_payload_bytes == 0
                   && (hdr.wire.tcp.flags & (TCP_FLAG_SYN | TCP_FLAG_FIN | TCP_FLAG_RST)) == 0;
            sack = hdr.sack_blocks[0].isValid();
            outstanding = seq_before(ack, highest);
            bit<8> kind = classify_ack.execute(cell);
            bit<32> confirmed = read_confirmed.execute(cell);

            /* RFC 2883: a first block below the ACK number, or inside the second block, reports a duplicate. */
            bool dsack = sack && (seq_before(hdr.sack_blocks[0].left_edge, ack)
                                  || (hdr.sack_blocks[1].isValid()
                                      && !seq_before(hdr.sack_blocks[0].left_edge, hdr.sack_blocks[1].left_edge)
                                      && !seq_before(hdr.sack_blocks[1].right_edge, hdr.sack_blocks[0].right_edge)));
            bool timestamps = hdr.tcp_timestamps.isValid()
                              && hdr.tcp_timestamps.nop1 == TCP_OPTION_NOP
                              && hdr.tcp_timestamps.nop2 == TCP_OPTION_NOP
                              && hdr.tcp_timestamps.kind == TCP_OPTION_TIMESTAMPS
                              && hdr.tcp_timestamps.length == TCP_OPTION_TIMESTAMPS_LENGTH;
            bool options_read = hdr.wire.tcp.data_offset == TCP_DATA_OFFSET_MIN
                                || (timestamps && hdr.wire.tcp.data_offset == TCP_DATA_OFFSET_TIMESTAMPS)
                                || (timestamps && sack);

            if (kind == ACK_DUP) {
                decision = VISIBLE_DUP_ACK_FORWARDED;
                bit<32> dups_and_may_hold = count_dup.execute(cell);
                bit<32> dups = dups_and_may_hold & 0xffff;
                may_hold = dups_and_may_hold[31:31] == 1 && !dsack;
                /* Never past what was forwarded, what the helper confirmed, or the lowest SACK left edge. */
                boost_cap = seq_before(confirmed, highest) ? confirmed : highest;
                if (sack && seq_before(hdr.sack_blocks[0].left_edge, boost_cap)) {
                    boost_cap = hdr.sack_blocks[0].left_edge;
                }
                if (hdr.sack_blocks[1].isValid() && seq_before(hdr.sack_blocks[1].left_edge, boost_cap)) {
                    boost_cap = hdr.sack_blocks[1].left_edge;
                }
                if (hdr.sack_blocks[2].isValid() && seq_before(hdr.sack_blocks[2].left_edge, boost_cap)) {
                    boost_cap = hdr.sack_blocks[2].left_edge;
                }
                may_boost = covered && options_read && dups <= (bit<32>)boosts_max;
                bit<32> target = 0;
                if (may_boost) {
                    target = boost.execute(cell);
                }
                boosted = target != 0;
                bit<8> held = hold_dup.execute(cell);
                if (boosted) {
                    hdr.wire.tcp.ack_no = target;
                    tcp_rewritten = true;
                    decision = VISIBLE_BOOSTED;
                } else if (held == 1) {
                    dprsr_md.drop_ctl = 1;
                    decision = VISIBLE_HELD;
                } else if (request.execute(cell) == 1) {
                    to_helper(HELPER_RETRANSMIT);
                    decision = VISIBLE_RETRANSMIT_REQUESTED;
                }
            } else if (kind == ACK_NEW || kind == ACK_FIRST) {
                decision = VISIBLE_NEW_ACK;
                end_burst.execute(cell);
                bit<8> next;
                if (kind == ACK_FIRST) {
                    next = first_sent.execute(cell);
                } else {
                    next = advance_sent.execute(cell);
                }
                owing = next == SENT_OWED;
                hide_candidate = kind == ACK_NEW && hold_budget != 0 && !owing && sack && !dsack;
                if (end_hold.execute(cell) == 1) {
                    sack_to_nops();
                    tcp_rewritten = true;
                    decision = VISIBLE_SACK_HIDDEN;
                }
                new_burst_requests.execute(cell);
                if (owing) {
                    to_helper(HELPER_RETRANSMIT);
                    decision = VISIBLE_RETRANSMIT_REQUESTED;
                } else if (next == SENT_REPORT) {
                    to_helper(HELPER_ACK_REPORT);
                    decision = VISIBLE_ACK_REPORTED;
                }
            }
        }
        if (decision != NO_DECISION) {
            decisions.count(decision);
        }
    }
}

#endif  // TNG_TNA_VISIBLE_P4
