/*
 * tng main pipeline (tng.p4): headers and metadata, shared by every target. The wire headers (header.p4) sit
 * unchanged in tng_headers_t.wire, so the wire parser and deparser are reused as they are.
 */
#ifndef TNG_PIPELINE_HEADER_P4
#define TNG_PIPELINE_HEADER_P4

#include "header.p4"
#include "pipeline_define.p4"

/* Follows an Ethernet header of type ETHERTYPE_TNG_HELPER on frames to the retransmission helper; the frame the
 * switch received comes next, unchanged. */
header helper_t {
    helper_reason_t reason;
    bit<8>          _reserved;
}

/* The TCP options of a header with data offset 8 when they are NOP, NOP, timestamps (RFC 7323): what Linux sends on
 * ACKs without SACK blocks. Other layouts are extracted too and then recognised as "not timestamps only". */
header tcp_timestamps_t {
    bit<8>  nop1;
    bit<8>  nop2;
    bit<8>  kind;
    bit<8>  length;
    bit<32> ts_value;
    bit<32> ts_echo_reply;
}

/* NOP, NOP, SACK kind and length after the timestamps of a Linux ACK that reports SACK blocks; the blocks follow. */
header tcp_sack_t {
    bit<8> nop1;
    bit<8> nop2;
    bit<8> kind;
    bit<8> length;
}

header sack_block_t {
    bit<32> left_edge;
    bit<32> right_edge;
}

struct tng_headers_t {
    packet_out_t     packet_out;
    packet_in_t      packet_in;
    ethernet_t       helper_ethernet;
    helper_t         helper;
    headers_t        wire;
    tcp_timestamps_t tcp_timestamps;
    tcp_sack_t       tcp_sack;
    sack_block_t[TCP_SACK_BLOCKS_MAX] sack_blocks;
}

/* Sent once per new flow (one direction of a 5-tuple); digest name "new_flow_digest_t". */
struct new_flow_digest_t {
    ipv4_addr_t src_addr;
    ipv4_addr_t dst_addr;
    bit<8>      protocol;
    l4_port_t   src_port;
    l4_port_t   dst_port;
    port_num_t  ingress_port;
    policy_id_t policy;
    bit<64>     connection_id;  // tng connection id, 0 for other traffic
}

struct tng_metadata_t {
    local_metadata_t wire;
    port_role_t      role;
    bool             injected;  // routed packet-out or frame from the helper port: no VISIBLE, no digest
    bool             bypass;    // packet-out to a given port: leaves unchanged
    bool             routed;
    bool             lwip;      // the route is an LWIP next hop: steer between lte_port and wifi_port
    port_num_t       lte_port;
    mac_addr_t       lte_dst_mac;
    port_num_t       wifi_port;
    mac_addr_t       wifi_dst_mac;
    policy_id_t      policy;
    l4_port_t        l4_src_port;
    l4_port_t        l4_dst_port;
    bit<16>          tcp_payload_bytes;
    /* Kept by the clone to the helper (field list 1 of clone_preserving_field_list). */
    @field_list(1)
    helper_reason_t  helper_reason;
    @field_list(1)
    port_num_t       helper_ingress_port;
}

#endif  // TNG_PIPELINE_HEADER_P4
