/*
 * tng pipelines: header types and the parsed-headers struct, shared by every target.
 * tng_flow_t and the handshake prefixes follow docs/wire-format.md field by field.
 */
#ifndef TNG_HEADER_P4
#define TNG_HEADER_P4

#include "define.p4"

/* Controller packet I/O over the CPU port (P4Runtime PacketIn / PacketOut metadata). */
@controller_header("packet_in")
header packet_in_t {
    port_num_t ingress_port;
    bit<7>     _pad;
}

@controller_header("packet_out")
header packet_out_t {
    port_num_t egress_port;
    bit<7>     _pad;
}

header ethernet_t {
    mac_addr_t dst_addr;
    mac_addr_t src_addr;
    bit<16>    ether_type;
}

header ipv4_t {
    bit<4>      version;
    bit<4>      ihl;
    bit<6>      dscp;
    bit<2>      ecn;
    bit<16>     total_len;
    bit<16>     identification;
    bit<3>      flags;
    bit<13>     frag_offset;
    bit<8>      ttl;
    bit<8>      protocol;
    bit<16>     hdr_checksum;
    ipv4_addr_t src_addr;
    ipv4_addr_t dst_addr;
}

header udp_t {
    l4_port_t src_port;
    l4_port_t dst_port;
    bit<16>   length;
    bit<16>   checksum;
}

header tcp_t {
    l4_port_t src_port;
    l4_port_t dst_port;
    bit<32>   seq_no;
    bit<32>   ack_no;
    bit<4>    data_offset;
    bit<4>    res;
    bit<8>    flags;
    bit<16>   window;
    bit<16>   checksum;
    bit<16>   urgent_ptr;
}

/* The 24-byte cleartext flow header (wire-format section 2). */
header tng_flow_t {
    bit<8>  version;
    bit<8>  packet_type;
    bit<8>  flags;
    bit<8>  channel_id;
    bit<64> connection_id;
    bit<32> packet_number;
    bit<16> payload_length;
    bit<16> queue_level;
    bit<32> rate_hint;
}

/* Fixed fields of an INITIAL payload (wire-format section 5). */
header tng_initial_prefix_t {
    bit<8>  stage;
    bit<16> token_length;
    bit<16> noise_length;
}

/* Fixed field of a RETRY payload (wire-format section 5). */
header tng_retry_prefix_t {
    bit<16> token_length;
}

/* First field of a SECTION payload (wire-format section 10); the next hop and the inner packet stay unparsed. */
header tng_section_prefix_t {
    bit<8> section_version;
}

struct headers_t {
    ethernet_t           ethernet;
    ipv4_t               ipv4;
    tcp_t                tcp;
    udp_t                udp;
    tng_flow_t           tng_flow;
    tng_initial_prefix_t tng_initial;
    tng_retry_prefix_t   tng_retry;
    tng_section_prefix_t tng_section;
}

/* Per-packet metadata of the tng pipelines; tng_wire needs none. */
struct local_metadata_t {}

#endif  // TNG_HEADER_P4
