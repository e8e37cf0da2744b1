/*
 * v1model parser, checksum controls and deparser of the main pipeline. They wrap the wire pieces (parser.p4,
 * checksum.p4, deparser.p4) around the controller and helper headers: a packet-out header first on the CPU port,
 * then a helper encapsulation if the frame has one (the helper's confirmations), the TCP timestamps option after a
 * TCP header of data offset 8; packet-in and helper encapsulation on the way out.
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
            default: accept;
        }
    }

    state parse_tcp_timestamps {
        packet.extract(hdr.tcp_timestamps);
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
    }
}

#endif  // TNG_V1MODEL_PIPELINE_IO_P4
