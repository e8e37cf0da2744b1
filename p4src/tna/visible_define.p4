/*
 * TNA VISIBLE's definitions, shared by its controls (tna/visible.p4 says how they work): what a packet is to VISIBLE,
 * the register actions' verdicts, and the per-packet state that flows from one register's table to the next.
 */
#ifndef TNG_TNA_VISIBLE_DEFINE_P4
#define TNG_TNA_VISIBLE_DEFINE_P4

#include "shared/size.p4"

/* A cell is taken over after this long without packets of its flow (1 s: the controller's default). */
#define VISIBLE_TNA_IDLE_TIMEOUT 3906250
/* burst counts dup-ACKs in units of 2^-VISIBLE_EWMA_FRACTION_BITS, as v1model's. */
#define VISIBLE_TNA_DUP (1 << VISIBLE_EWMA_FRACTION_BITS)
/* What a boost adds to the ACK number (a full Ethernet segment of TCP with timestamps). */
#define VISIBLE_TNA_BOOST_BYTES 1448
/* The flow's cell in every register: the low bits of its key. */
#define VISIBLE_CELL flow.flow_id[VISIBLE_FLOW_INDEX_BITS - 1:0]

typedef bit<VISIBLE_FLOW_INDEX_BITS> flow_cell_t;

struct visible_pair_t {
    bit<32> lo;
    bit<32> hi;
}

/* What a packet is to VISIBLE (table packet_kind). */
typedef bit<2> visible_kind_t;
const visible_kind_t KIND_NONE = 0;
const visible_kind_t KIND_CONFIRMATION = 1;  // the helper confirms copies it holds
const visible_kind_t KIND_DATA = 2;          // a downlink segment of a steered flow
const visible_kind_t KIND_ACK = 3;           // an uplink ACK from the LTE or Wi-Fi side

/* A register action's verdict is its predicate, this.predicate(cmplo, cmphi): one bit of four, 1 << (cmplo + 2 cmphi),
 * so that the step tables after it match on it (0 where the action did not run). */
const bit<8> PREDICATE_NONE = 1;  // neither comparison held
const bit<8> PREDICATE_LO = 2;    // only the first
const bit<8> PREDICATE_HI = 4;    // only the second
const bit<8> PREDICATE_BOTH = 8;
/* flow_owner: {key matches, cell idle} */
const bit<8> OWNER_OTHER = PREDICATE_NONE;
const bit<8> OWNER_SELF = PREDICATE_LO;
const bit<8> OWNER_CLAIMED = PREDICATE_HI;
const bit<8> OWNER_SELF_IDLE = PREDICATE_BOTH;  // its own cell, idle as well: touched, as OWNER_SELF
/* ack_window: {same window, no ACK before} */
const bit<8> WINDOW_CHANGED = PREDICATE_NONE;
const bit<8> WINDOW_SAME = PREDICATE_LO;
const bit<8> WINDOW_FIRST = PREDICATE_HI;
const bit<8> WINDOW_FIRST_SAME = PREDICATE_BOTH;  // first ACK of the cell (its stale window matched): first
/* receiver_ack: {the receiver's ACK, newer than it} */
const bit<8> ORDER_OTHER = PREDICATE_NONE;
const bit<8> ORDER_SAME = PREDICATE_LO;
const bit<8> ORDER_NEWER = PREDICATE_HI;
/* burst: {may be held, may be boosted} */
const bit<8> BURST_NONE = PREDICATE_NONE;
const bit<8> BURST_HOLD = PREDICATE_LO;
const bit<8> BURST_BOOST = PREDICATE_HI;
const bit<8> BURST_BOTH = PREDICATE_BOTH;

/* A packet's way through VISIBLE's tables. The policy, flags and results start at 0: a step table matches on 0 where an
 * earlier step did not run. */
struct visible_flow_t {
    visible_kind_t kind;
    /* The policy's parameters (ingress.visible.params) and the helper's state (ingress.visible.helper). */
    bit<1> enabled;          // VISIBLE on in the packet's policy
    bit<32> hold_budget;
    bit<32> slack;           // 32 bits wide so that the shifts into slack_dups take whole fields
    bit<32> boosts_max;
    bit<8> requests_max;
    bit<32> report_every;
    bit<1> helper_ok;
    bit<16> helper_epoch;
    /* Flags of the packet alone (tables packet_plan and segment_bounds). */
    bit<1> helper_copies;    // the helper is up in an epoch: copies count
    bit<1> copying;          // a downlink segment with payload, SYN or FIN goes to the helper
    bit<1> boost_options;    // an ACK whose options the switch reads all of, the helper copying
    bit<1> dsack;            // the ACK's first SACK block is a D-SACK (RFC 2883)
    /* The registers' PHV inputs (two per register), each set before the register's stage. */
    bit<32> flow_id;
    bit<32> in_a;            // downlink: seq; uplink: ACK number; confirmation: start of the held range
    bit<32> in_b;            // downlink: seg_end; uplink: the lowest SACK left edge
    bit<32> in_c;            // downlink: where copies start; uplink: ACK number, a dup-ACK's boost cap from
                             // confirmed_end on; confirmation: end of the range
    bit<32> fwd_cap;         // uplink: forwarded_end as it was, lowered to the lowest SACK left edge
    bit<32> length;          // downlink: payload + SYN + FIN
    bit<32> slack_dups;      // hold_slack and boost_max in burst's units
    bit<32> boost_dups;
    bit<32> hold_stale;      // a hold clock started before this has spent the budget
    bit<32> report_below;    // ACK number - report_bytes: a report at or below it is due again
    /* Results of the registers' actions. */
    bit<8> owner;
    bit<8> seen;
    bit<8> order;
    bit<8> outstanding;      // data above the ACK number went downlink
    bit<8> copies;           // the ACK number is covered by copies of the helper's epoch
    bit<8> started;          // copies start with this segment
    bit<8> allows;
    bit<32> moved;           // a confirmation moved confirmed_end
    bit<8> due;              // a report of the receiver's ACK
    bit<32> target;          // the boosted ACK number
    bit<8> owed;
    bit<8> held;
    bit<8> hide;
    bit<8> requested;
}

#endif  // TNG_TNA_VISIBLE_DEFINE_P4
