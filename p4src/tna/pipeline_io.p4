/*
 * TNA parsers and deparsers of the main pipeline (v1model/pipeline_io.p4's counterpart). Ingress parses like v1model:
 * a packet-out header first on the CPU port, then a helper encapsulation if the frame has one, the wire headers
 * (Ethernet / IPv4 / TCP / UDP / tng, as v1model/parser.p4), the TCP timestamps option and the SACK blocks in Linux's
 * layout. Tofino's parser has no custom errors and no verify(), so it only extracts: the receiver rules of wire-format
 * section 8 are checked, in their order, by WireDropReason (tna/drop_reason.p4) on the fields extracted here; the IPv4
 * header checksum is verified with a parser Checksum. The wire headers are parsed here rather than by a sub-parser
 * because Tofino subtracts fields from a checksum only in the state that extracts them; the TCP options are a
 * sub-parser both gresses run. The TCP checksum residual leaves out what VISIBLE may rewrite (the ACK number, and the
 * options, extracted after the residual's end); it is bridged to egress, where VISIBLE runs and the deparser adds
 * them back. The ingress deparser also recomputes the IPv4 checksum and packs the new-flow digest. Egress parses the
 * bridged or mirror header in front, the helper encapsulation of the helper's confirmations, then the headers
 * VISIBLE and backpressure rewrite, taking the UDP checksum residual without the tng feedback fields; its deparser
 * mirrors copies for the helper (v1model: clone_preserving_field_list) and queue reports to the recirculation port,
 * where the ingress parser takes them back (tna/queue_report.p4).
 */
#ifndef TNG_TNA_PIPELINE_IO_P4
#define TNG_TNA_PIPELINE_IO_P4

#include <core.p4>
#include <tna.p4>

#include "tna/header.p4"

/* Tofino 1's PCIe CPU port on a two-pipe chip (320 on four pipes): the port the controller's packet-outs come in on
 * and packet-ins leave by. BMv2's is CPU_PORT (255); the control plane learns either from its target config. */
const port_num_t TNA_CPU_PORT = 192;

/* The TCP options VISIBLE reads, in Linux's layout (timestamps, then SACK blocks), after the TCP header: both
 * parsers run it, ingress for the checks' and VISIBLE's lengths, egress for VISIBLE. */
parser TcpOptionsParser(packet_in packet, inout tng_headers_t hdr) {
    state start {
        transition select(hdr.wire.tcp.data_offset) {
            TCP_DATA_OFFSET_TIMESTAMPS: parse_tcp_timestamps;
            TCP_DATA_OFFSET_SACK_1: parse_tcp_timestamps_and_sack;
            TCP_DATA_OFFSET_SACK_2: parse_tcp_timestamps_and_sack;
            TCP_DATA_OFFSET_SACK_3: parse_tcp_timestamps_and_sack;
            default: accept;
        }
    }

    state parse_tcp_timestamps {
        packet.extract(hdr.tcp_timestamps);
        transition accept;
    }

    @noWarn("uninitialized_use")
    @noWarn("invalid_header")
    state parse_tcp_timestamps_and_sack {
        packet.extract(hdr.tcp_timestamps);
        packet.extract(hdr.tcp_sack);
        transition select(hdr.tcp_sack.nop1, hdr.tcp_sack.nop2) {
            (TCP_OPTION_NOP, TCP_OPTION_NOP): check_sack_length;
            default: accept;
        }
    }

    /* One select per state within Tofino 1's parser match registers (16 + 8 + 8 bits): the SACK option's kind and
     * length, then whether the data offset agrees with the length. */
    state check_sack_length {
        transition select(hdr.tcp_sack.kind, hdr.tcp_sack.length) {
            (TCP_OPTION_SACK, TCP_OPTION_SACK_1_LENGTH): check_sack_1_offset;
            (TCP_OPTION_SACK, TCP_OPTION_SACK_2_LENGTH): check_sack_2_offset;
            (TCP_OPTION_SACK, TCP_OPTION_SACK_3_LENGTH): check_sack_3_offset;
            default: accept;
        }
    }

    @noWarn("uninitialized_use")
    @noWarn("invalid_header")
    state check_sack_1_offset {
        transition select(hdr.wire.tcp.data_offset) {
            TCP_DATA_OFFSET_SACK_1: parse_sack_block_1;
            default: accept;
        }
    }

    @noWarn("uninitialized_use")
    @noWarn("invalid_header")
    state check_sack_2_offset {
        transition select(hdr.wire.tcp.data_offset) {
            TCP_DATA_OFFSET_SACK_2: parse_sack_block_2;
            default: accept;
        }
    }

    @noWarn("uninitialized_use")
    @noWarn("invalid_header")
    state check_sack_3_offset {
        transition select(hdr.wire.tcp.data_offset) {
            TCP_DATA_OFFSET_SACK_3: parse_sack_block_3;
            default: accept;
        }
    }

    state parse_sack_block_3 {
        packet.extract(hdr.sack_blocks[2]);
        transition parse_sack_block_2;
    }

    state parse_sack_block_2 {
        packet.extract(hdr.sack_blocks[1]);
        transition parse_sack_block_1;
    }

    state parse_sack_block_1 {
        packet.extract(hdr.sack_blocks[0]);
        transition accept;
    }
}

parser TngIngressParser(packet_in packet,
                        out tna_headers_t hdr,
                        out tna_ingress_metadata_t md,
                        out ingress_intrinsic_metadata_t ig_intr_md) {
    Checksum() ipv4_checksum;
    Checksum() tcp_checksum;
    TcpOptionsParser() tcp_options;

    state start {
        packet.extract(ig_intr_md);
        packet.advance(PORT_METADATA_SIZE);
        md.tng = {{}, ROLE_CORE, false, false, false, false, 0, 0, 0, 0, DEFAULT_POLICY, 0, 0, 0, HELPER_NONE, 0};
        md.ipv4_checksum_error = false;
        md.tcp_residual = 0;
        md.new_flow = {0, 0, 0, 0, 0, 0, DEFAULT_POLICY, 0};
        transition select(ig_intr_md.ingress_port) {
            TNA_CPU_PORT: parse_packet_out;
            TNA_RECIRC_PORT: parse_queue_report;
            default: check_helper;
        }
    }

    /* Egress's report of a link's queueing time; the truncated packet behind it is not parsed. */
    state parse_queue_report {
        packet.extract(hdr.queue_report);
        transition accept;
    }

    state parse_packet_out {
        packet.extract(hdr.tng.packet_out);
        transition check_helper;
    }

    state check_helper {
        transition select(packet.lookahead<ethernet_t>().ether_type) {
            ETHERTYPE_TNG_HELPER: parse_helper;
            default: parse_wire;
        }
    }

    state parse_helper {
        packet.extract(hdr.tng.helper_ethernet);
        packet.extract(hdr.tng.helper);
        transition parse_wire;
    }

    state parse_wire {
        packet.extract(hdr.tng.wire.ethernet);
        transition select(hdr.tng.wire.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }

    /* Only option-less, unfragmented (or first-fragment) IPv4 carries a parsed L4 header. */
    state parse_ipv4 {
        packet.extract(hdr.tng.wire.ipv4);
        ipv4_checksum.add(hdr.tng.wire.ipv4);
        md.ipv4_checksum_error = ipv4_checksum.verify() || md.ipv4_checksum_error;
        transition select(hdr.tng.wire.ipv4.ihl, hdr.tng.wire.ipv4.frag_offset, hdr.tng.wire.ipv4.protocol) {
            (IPV4_IHL_MIN, 0, IP_PROTO_TCP): parse_tcp;
            (IPV4_IHL_MIN, 0, IP_PROTO_UDP): parse_udp;
            default: accept;
        }
    }

    /* The residual ends here: it leaves out the checksum, the ACK number and (Tofino subtracts every header extracted
     * after the deposit) the options, which the ingress deparser adds back as they leave. */
    state parse_tcp {
        packet.extract(hdr.tng.wire.tcp);
        md.tng.l4_src_port = hdr.tng.wire.tcp.src_port;
        md.tng.l4_dst_port = hdr.tng.wire.tcp.dst_port;
        tcp_checksum.subtract_all_and_deposit(md.tcp_residual);
        tcp_checksum.subtract({hdr.tng.wire.tcp.checksum, hdr.tng.wire.tcp.ack_no});
        tcp_options.apply(packet, hdr.tng);
        transition accept;
    }

    state parse_udp {
        packet.extract(hdr.tng.wire.udp);
        md.tng.l4_src_port = hdr.tng.wire.udp.src_port;
        md.tng.l4_dst_port = hdr.tng.wire.udp.dst_port;
        transition select(hdr.tng.wire.udp.dst_port, hdr.tng.wire.udp.src_port) {
            (TNG_UDP_PORT, _): parse_tng_flow;
            (_, TNG_UDP_PORT): parse_tng_flow;
            default: accept;
        }
    }

    state parse_tng_flow {
        packet.extract(hdr.tng.wire.tng_flow);
        transition select(hdr.tng.wire.tng_flow.packet_type) {
            TNG_TYPE_INITIAL: parse_tng_initial;
            TNG_TYPE_RETRY: parse_tng_retry;
            TNG_TYPE_SECTION: parse_tng_section;
            default: accept;
        }
    }

    state parse_tng_initial {
        packet.extract(hdr.tng.wire.tng_initial);
        transition accept;
    }

    state parse_tng_retry {
        packet.extract(hdr.tng.wire.tng_retry);
        transition accept;
    }

    state parse_tng_section {
        packet.extract(hdr.tng.wire.tng_section);
        transition accept;
    }

}

control TngIngressDeparser(packet_out packet,
                           inout tna_headers_t hdr,
                           in tna_ingress_metadata_t md,
                           in ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {
    Checksum() ipv4_checksum;
    @name(".new_flow_digest_t")
    Digest<new_flow_digest_t>(DIGEST_TYPE_NEW_FLOW) new_flow_digest;

    apply {
        if (ig_dprsr_md.digest_type == DIGEST_TYPE_NEW_FLOW) {
            new_flow_digest.pack(md.new_flow);
        }
        if (hdr.tng.wire.ipv4.isValid()) {
            hdr.tng.wire.ipv4.hdr_checksum = ipv4_checksum.update({
                hdr.tng.wire.ipv4.version, hdr.tng.wire.ipv4.ihl, hdr.tng.wire.ipv4.dscp, hdr.tng.wire.ipv4.ecn,
                hdr.tng.wire.ipv4.total_len, hdr.tng.wire.ipv4.identification, hdr.tng.wire.ipv4.flags,
                hdr.tng.wire.ipv4.frag_offset, hdr.tng.wire.ipv4.ttl, hdr.tng.wire.ipv4.protocol,
                hdr.tng.wire.ipv4.src_addr, hdr.tng.wire.ipv4.dst_addr});
        }
        packet.emit(hdr);
    }
}

parser TngEgressParser(packet_in packet,
                       out tna_headers_t hdr,
                       out tna_egress_metadata_t md,
                       out egress_intrinsic_metadata_t eg_intr_md) {
    Checksum() udp_checksum;
    TcpOptionsParser() tcp_options;

    state start {
        packet.extract(eg_intr_md);
        md.tng = {{}, ROLE_CORE, false, false, false, false, 0, 0, 0, 0, DEFAULT_POLICY, 0, 0, 0, HELPER_NONE, 0};
        md.helper_session = 0;
        md.udp_residual = 0;
        md.udp_rewritten = false;
        md.tcp_residual = 0;
        md.tcp_rewritten = false;
        md.report_session = 0;
        md.waited = 0;
        transition select(packet.lookahead<bridge_kind_t>()) {
            BRIDGE_KIND_HELPER_COPY: parse_helper_copy;
            BRIDGE_KIND_QUEUE_REPORT: parse_queue_report;
            default: parse_bridged;
        }
    }

    /* A queue report on its way to the recirculation port: it leaves as it came. */
    state parse_queue_report {
        packet.extract(hdr.queue_report);
        transition accept;
    }

    /* A copy for the helper: the frame as sent follows and leaves unparsed, behind the encapsulation. */
    state parse_helper_copy {
        packet.extract(md.helper_mirror);
        transition accept;
    }

    state parse_bridged {
        packet.extract(hdr.bridged);
        md.tng.policy = hdr.bridged.policy;
        md.tng.role = hdr.bridged.role;
        md.tng.lwip = hdr.bridged.lwip;
        md.tng.injected = hdr.bridged.injected;
        md.tng.bypass = hdr.bridged.bypass;
        md.tng.tcp_payload_bytes = hdr.bridged.tcp_payload_bytes;
        md.tcp_residual = hdr.bridged.tcp_residual;
        transition select(packet.lookahead<ethernet_t>().ether_type) {
            ETHERTYPE_TNG_HELPER: parse_helper;
            default: parse_ethernet;
        }
    }

    /* The helper's confirmation of copies, for VISIBLE. */
    state parse_helper {
        packet.extract(hdr.tng.helper_ethernet);
        packet.extract(hdr.tng.helper);
        transition parse_ethernet;
    }

    state parse_ethernet {
        packet.extract(hdr.tng.wire.ethernet);
        transition select(hdr.tng.wire.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }

    state parse_ipv4 {
        packet.extract(hdr.tng.wire.ipv4);
        transition select(hdr.tng.wire.ipv4.ihl, hdr.tng.wire.ipv4.frag_offset, hdr.tng.wire.ipv4.protocol) {
            (IPV4_IHL_MIN, 0, IP_PROTO_TCP): parse_tcp;
            (IPV4_IHL_MIN, 0, IP_PROTO_UDP): parse_udp;
            default: accept;
        }
    }

    /* The checksum's residual came with the bridged header (ingress's parser took it). */
    state parse_tcp {
        packet.extract(hdr.tng.wire.tcp);
        md.tng.l4_src_port = hdr.tng.wire.tcp.src_port;
        md.tng.l4_dst_port = hdr.tng.wire.tcp.dst_port;
        tcp_options.apply(packet, hdr.tng);
        transition accept;
    }

    /* Tofino subtracts a field from a checksum in the state that extracts it. */
    state parse_udp {
        packet.extract(hdr.tng.wire.udp);
        md.tng.l4_src_port = hdr.tng.wire.udp.src_port;
        md.tng.l4_dst_port = hdr.tng.wire.udp.dst_port;
        udp_checksum.subtract({hdr.tng.wire.udp.checksum});
        transition select(hdr.tng.wire.udp.dst_port, hdr.tng.wire.udp.src_port) {
            (TNG_UDP_PORT, _): parse_tng_flow;
            (_, TNG_UDP_PORT): parse_tng_flow;
            default: accept;
        }
    }

    /* Ingress let only valid tng packets through, so the flow header is all there. */
    state parse_tng_flow {
        packet.extract(hdr.tng.wire.tng_flow);
        udp_checksum.subtract({hdr.tng.wire.tng_flow.queue_level, hdr.tng.wire.tng_flow.rate_hint});
        udp_checksum.subtract_all_and_deposit(md.udp_residual);
        transition accept;
    }
}

control TngEgressDeparser(packet_out packet,
                          inout tna_headers_t hdr,
                          in tna_egress_metadata_t md,
                          in egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {
    Checksum() ipv4_checksum;
    Checksum() udp_checksum;
    Checksum() tcp_checksum;
    Mirror() report_mirror;
    Mirror() helper_mirror;

    apply {
        if (eg_dprsr_md.mirror_type == MIRROR_TYPE_QUEUE_REPORT) {
            report_mirror.emit<queue_report_t>(md.report_session, md.queue_report);
        } else if (eg_dprsr_md.mirror_type == MIRROR_TYPE_HELPER) {
            helper_mirror.emit<helper_mirror_t>(md.helper_session, md.helper_mirror);
        }
        if (hdr.tng.wire.ipv4.isValid()) {
            hdr.tng.wire.ipv4.hdr_checksum = ipv4_checksum.update({
                hdr.tng.wire.ipv4.version, hdr.tng.wire.ipv4.ihl, hdr.tng.wire.ipv4.dscp, hdr.tng.wire.ipv4.ecn,
                hdr.tng.wire.ipv4.total_len, hdr.tng.wire.ipv4.identification, hdr.tng.wire.ipv4.flags,
                hdr.tng.wire.ipv4.frag_offset, hdr.tng.wire.ipv4.ttl, hdr.tng.wire.ipv4.protocol,
                hdr.tng.wire.ipv4.src_addr, hdr.tng.wire.ipv4.dst_addr});
        }
        /* A zero UDP checksum means "none" and stays zero (backpressure sets udp_rewritten only otherwise); a sum
         * that comes out zero is sent as 0xffff. */
        if (md.udp_rewritten) {
            hdr.tng.wire.udp.checksum = udp_checksum.update({
                hdr.tng.wire.tng_flow.queue_level, hdr.tng.wire.tng_flow.rate_hint, md.udp_residual}, true);
        }
        if (md.tcp_rewritten) {
            hdr.tng.wire.tcp.checksum = tcp_checksum.update({
                hdr.tng.wire.tcp.ack_no,
                hdr.tng.tcp_timestamps.nop1, hdr.tng.tcp_timestamps.nop2, hdr.tng.tcp_timestamps.kind,
                hdr.tng.tcp_timestamps.length, hdr.tng.tcp_timestamps.ts_value, hdr.tng.tcp_timestamps.ts_echo_reply,
                hdr.tng.tcp_sack.nop1, hdr.tng.tcp_sack.nop2, hdr.tng.tcp_sack.kind, hdr.tng.tcp_sack.length,
                hdr.tng.sack_blocks[0].left_edge, hdr.tng.sack_blocks[0].right_edge,
                hdr.tng.sack_blocks[1].left_edge, hdr.tng.sack_blocks[1].right_edge,
                hdr.tng.sack_blocks[2].left_edge, hdr.tng.sack_blocks[2].right_edge,
                md.tcp_residual});
        }
        /* Not the bridged header: it ends in egress, and a deparsed header keeps its layout in PHV containers. */
        packet.emit(hdr.queue_report);
        packet.emit(hdr.tng);
    }
}

#endif  // TNG_TNA_PIPELINE_IO_P4
