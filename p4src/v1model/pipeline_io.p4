/*
 * v1model parser, checksum controls and deparser of the main pipeline. They wrap the wire pieces (parser.p4,
 * checksum.p4, deparser.p4) around the controller and helper headers: a packet-out header first on the CPU port,
 * then a helper encapsulation if the frame has one (the helper's confirmations), the TCP timestamps option after a
 * TCP header of data offset 8, 11, 13 or 15 and the SACK blocks after it in Linux's layout (VISIBLE reads them);
 * packet-in and helper encapsulation on the way out.
 */
#ifndef TNG_V1MODEL_PIPELINE_IO_P4
#define TNG_V1MODEL_PIPELINE_IO_P4

#include <core.p4>
#include <v1model.p4>

#include "shared/pipeline_header.p4"
#include "v1model/checksum.p4"
#include "v1model/deparser.p4"
#include "v1model/parser.p4"

parser TngPipelineParser(packet_in packet,
                         out tng_headers_t hdr,
                         inout tng_metadata_t md,
                         inout standard_metadata_t std_md) {
    TngParser() wire_parser;

    state start {
        transition select(std_md.ingress_port) {
            CPU_PORT: parse_packet_out;
            default: check_helper;
        }
    }

    state parse_packet_out {
        packet.extract(hdr.packet_out);
        transition check_helper;
    }

    state check_helper {
        transition select(packet.lookahead<ethernet_t>().ether_type) {
            ETHERTYPE_TNG_HELPER: parse_helper;
            default: parse_wire;
        }
    }

    state parse_helper {
        packet.extract(hdr.helper_ethernet);
        packet.extract(hdr.helper);
        transition parse_wire;
    }

    state parse_wire {
        wire_parser.apply(packet, hdr.wire, md.wire, std_md);
        transition select(hdr.wire.tcp.isValid()) {
            true: check_tcp_options;
            default: accept;
        }
    }

    /* Reached only with a valid TCP header, which p4c's flow analysis cannot see through the select on isValid(). */
    @noWarn("uninitialized_use")
    @noWarn("invalid_header")
    state check_tcp_options {
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

    /* Blocks are extracted only when the SACK option fills the rest of the header exactly; any other layout leaves
     * them invalid (and VISIBLE does not boost that ACK). */
    state parse_tcp_timestamps_and_sack {
        packet.extract(hdr.tcp_timestamps);
        packet.extract(hdr.tcp_sack);
        transition select(hdr.wire.tcp.data_offset, hdr.tcp_sack.nop1, hdr.tcp_sack.nop2, hdr.tcp_sack.kind,
                          hdr.tcp_sack.length) {
            (TCP_DATA_OFFSET_SACK_1, TCP_OPTION_NOP, TCP_OPTION_NOP, TCP_OPTION_SACK, TCP_OPTION_SACK_1_LENGTH):
                parse_sack_block_1;
            (TCP_DATA_OFFSET_SACK_2, TCP_OPTION_NOP, TCP_OPTION_NOP, TCP_OPTION_SACK, TCP_OPTION_SACK_2_LENGTH):
                parse_sack_block_2;
            (TCP_DATA_OFFSET_SACK_3, TCP_OPTION_NOP, TCP_OPTION_NOP, TCP_OPTION_SACK, TCP_OPTION_SACK_3_LENGTH):
                parse_sack_block_3;
            default: accept;
        }
    }

    state parse_sack_block_3 {
        packet.extract(hdr.sack_blocks.next);
        transition parse_sack_block_2;
    }

    state parse_sack_block_2 {
        packet.extract(hdr.sack_blocks.next);
        transition parse_sack_block_1;
    }

    state parse_sack_block_1 {
        packet.extract(hdr.sack_blocks.next);
        transition accept;
    }
}

control TngPipelineVerifyChecksum(inout tng_headers_t hdr, inout tng_metadata_t md) {
    TngVerifyChecksum() wire_checksum;

    apply {
        wire_checksum.apply(hdr.wire, md.wire);
    }
}

/* IPv4 only: TCP and UDP checksums are updated incrementally where a field they cover changes. */
control TngPipelineComputeChecksum(inout tng_headers_t hdr, inout tng_metadata_t md) {
    TngComputeChecksum() wire_checksum;

    apply {
        wire_checksum.apply(hdr.wire, md.wire);
    }
}

control TngPipelineDeparser(packet_out packet, in tng_headers_t hdr) {
    TngDeparser() wire_deparser;

    apply {
        packet.emit(hdr.packet_in);
        packet.emit(hdr.helper_ethernet);
        packet.emit(hdr.helper);
        wire_deparser.apply(packet, hdr.wire);
        packet.emit(hdr.tcp_timestamps);
        packet.emit(hdr.tcp_sack);
        packet.emit(hdr.sack_blocks);
    }
}

#endif  // TNG_V1MODEL_PIPELINE_IO_P4
