/*
 * tng main pipeline (tng.p4): constants shared by every target. Every number the control plane sees is listed in
 * p4src/README.md, section "tng: the main pipeline".
 */
#ifndef TNG_PIPELINE_DEFINE_P4
#define TNG_PIPELINE_DEFINE_P4

#include "define.p4"

/* simple_switch_grpc --cpu-port. A packet-out whose egress_port is the CPU port itself is routed by the tables like
 * a packet received from the retransmission helper; any other egress_port sends it out of that port unchanged. */
const port_num_t CPU_PORT = 255;

/* What a port is attached to (table ingress.port_role; ports without an entry are ROLE_CORE). */
typedef bit<8> port_role_t;
const port_role_t ROLE_CORE = 0;
const port_role_t ROLE_LTE = 1;
const port_role_t ROLE_WIFI = 2;
const port_role_t ROLE_HELPER = 3;

typedef bit<8> policy_id_t;
const policy_id_t DEFAULT_POLICY = 0;

/* The two links of an LWIP next hop. */
typedef bit<8> link_t;
const link_t LINK_LTE = 0;
const link_t LINK_WIFI = 1;

/* Frames to the retransmission helper are encapsulated in an Ethernet header of this type (IEEE 802 local
 * experimental ethertype 1) followed by helper_t. */
const bit<16> ETHERTYPE_TNG_HELPER = 0x88b5;
typedef bit<8> helper_reason_t;
const helper_reason_t HELPER_NONE = 0;
const helper_reason_t HELPER_DATA_COPY = 1;   // a downlink TCP segment of a VISIBLE flow, as received
const helper_reason_t HELPER_ACK_REPORT = 2;  // the receiver's own ACK: copies below its ACK number may go
const helper_reason_t HELPER_RETRANSMIT = 3;  // a dup-ACK: re-inject the copy that starts at its ACK number
/* From the helper (packet-out to the CPU port or a frame on the helper port): it holds a copy of every byte of the
 * flow from the inner TCP header's sequence number up to its ACK number. Read by VISIBLE, never forwarded. */
const helper_reason_t HELPER_COPIES_HELD = 4;
/* The clone session the controller points at the helper (CPU port or helper port). */
const bit<32> HELPER_CLONE_SESSION = 1;

/* v1model standard_metadata.instance_type of an ingress-to-egress clone (BMv2). */
const bit<32> INSTANCE_TYPE_INGRESS_CLONE = 1;

/* Index of the ingress.visible.decisions counter. */
#define VISIBLE_DATA_TRACKED 0
#define VISIBLE_DATA_COPIED 1
#define VISIBLE_UNTRACKED 2
#define VISIBLE_NEW_ACK 3
#define VISIBLE_DUP_ACK 4
#define VISIBLE_HELD 5
#define VISIBLE_BOOSTED 6
#define VISIBLE_RETRANSMIT_REQUESTED 7
#define VISIBLE_ACK_REPORTED 8
#define VISIBLE_DUP_ACK_FORWARDED 9
#define VISIBLE_COPIES_CONFIRMED 10
#define VISIBLE_SACK_HIDDEN 11
#define VISIBLE_DECISION_COUNT 16

/* TCP flags (tcp_t.flags) and the option layouts Linux puts on ACKs: NOP, NOP, TS (data offset 8), then, when it
 * reports SACK blocks, NOP, NOP, SACK with one to three blocks (data offset 11, 13 or 15; RFC 2018). */
const bit<8> TCP_FLAG_FIN = 0x01;
const bit<8> TCP_FLAG_SYN = 0x02;
const bit<8> TCP_FLAG_RST = 0x04;
const bit<8> TCP_FLAG_ACK = 0x10;
const bit<4> TCP_DATA_OFFSET_MIN = 5;
const bit<4> TCP_DATA_OFFSET_TIMESTAMPS = 8;
const bit<8> TCP_OPTION_NOP = 1;
const bit<32> TCP_OPTION_NOP_X4 = 0x01010101;
const bit<8> TCP_OPTION_TIMESTAMPS = 8;
const bit<8> TCP_OPTION_TIMESTAMPS_LENGTH = 10;
const bit<8> TCP_OPTION_SACK = 5;
const bit<4> TCP_DATA_OFFSET_SACK_1 = 11;
const bit<4> TCP_DATA_OFFSET_SACK_2 = 13;
const bit<4> TCP_DATA_OFFSET_SACK_3 = 15;
const bit<8> TCP_OPTION_SACK_1_LENGTH = 10;
const bit<8> TCP_OPTION_SACK_2_LENGTH = 18;
const bit<8> TCP_OPTION_SACK_3_LENGTH = 26;
#define TCP_SACK_BLOCKS_MAX 3

/* IPv4 ECN field (RFC 3168). */
const bit<2> ECN_NOT_ECT = 0;
const bit<2> ECN_ECT1 = 1;
const bit<2> ECN_ECT0 = 2;
const bit<2> ECN_CE = 3;

/* tng feedback (wire-format section 2): queue_level counts 32 us units, 0xffff reads as 65534. */
const bit<16> TNG_QUEUE_LEVEL_MAX = 65534;
const bit<16> TNG_QUEUE_LEVEL_RESERVED = 0xffff;
#define TNG_QUEUE_LEVEL_SHIFT 5

/* VISIBLE keeps the EWMA of dup-ACK burst lengths with this many fractional bits. */
#define VISIBLE_EWMA_FRACTION_BITS 4

#endif  // TNG_PIPELINE_DEFINE_P4
