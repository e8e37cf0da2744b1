/*
 * tng_wire: the "wire check" pipeline. Every tng datagram (UDP port 4477, source or destination)
 * is checked against the receiver rules of docs/wire-format.md section 8 in the parser; a malformed
 * one is dropped and counted by reason in tng_wire_drops, a valid one is counted by packet type in
 * tng_wire_packets. Everything that passes is forwarded unchanged by port_forward.
 * P4Info names and the drop-reason table: p4src/README.md.
 */
#include <core.p4>
#include <v1model.p4>

#include "shared/define.p4"
#include "shared/header.p4"
#include "v1model/checksum.p4"
#include "v1model/deparser.p4"
#include "v1model/drop_reason.p4"
#include "v1model/parser.p4"

control ingress(inout headers_t hdr,
                inout local_metadata_t local_md,
                inout standard_metadata_t std_md) {

    counter(DROP_REASON_COUNT, CounterType.packets_and_bytes) tng_wire_drops;
    counter(TNG_PACKET_TYPE_COUNT, CounterType.packets_and_bytes) tng_wire_packets;
    WireDropReason() drop_reason;

    action drop() {
        mark_to_drop(std_md);
    }

    action forward(port_num_t port) {
        std_md.egress_spec = port;
    }

    table port_forward {
        key = {
            std_md.ingress_port: exact @name("ingress_port");
        }
        actions = {
            forward;
            drop;
        }
        default_action = drop();
        size = PORT_FORWARD_TABLE_SIZE;
    }

    apply {
        drop_reason_t reason;
        drop_reason.apply(std_md, reason);
        if (reason != DROP_REASON_NONE) {
            tng_wire_drops.count((bit<32>)reason);
            mark_to_drop(std_md);
        } else {
            if (hdr.tng_flow.isValid()) {
                tng_wire_packets.count((bit<32>)hdr.tng_flow.packet_type);
            }
            port_forward.apply();
        }
    }
}

control egress(inout headers_t hdr,
               inout local_metadata_t local_md,
               inout standard_metadata_t std_md) {
    apply {}
}

V1Switch(TngParser(), TngVerifyChecksum(), ingress(), egress(), TngComputeChecksum(), TngDeparser()) main;
