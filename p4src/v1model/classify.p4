/*
 * v1model: flow -> policy. A tng packet is first looked up by its connection id (it survives address changes);
 * otherwise, and for every other packet, the 5-tuple is matched against ternary entries whose priorities order
 * overlapping traffic classes. The table's default action is the default policy. The first packet of each flow (one
 * direction of a 5-tuple) sends a digest; two bit arrays indexed by independent hashes remember the flows seen.
 */
#ifndef TNG_V1MODEL_CLASSIFY_P4
#define TNG_V1MODEL_CLASSIFY_P4

#include <core.p4>
#include <v1model.p4>

#include "shared/p4info_id.p4"
#include "shared/pipeline_header.p4"
#include "shared/size.p4"

control Classify(inout tng_headers_t hdr, inout tng_metadata_t md, in standard_metadata_t std_md) {
    @id(P4INFO_ID_POLICY_PACKETS)
    counter(POLICY_COUNT, CounterType.packets_and_bytes) policy_packets;
    register<bit<1>>(SEEN_FLOW_CELLS) seen_flows_a;
    register<bit<1>>(SEEN_FLOW_CELLS) seen_flows_b;

    action set_policy(policy_id_t policy) {
        md.policy = policy;
    }

    @id(P4INFO_ID_CLASSIFY_CONNECTION)
    table connection_policy {
        key = {
            hdr.wire.tng_flow.connection_id: exact @name("connection_id");
        }
        actions = {
            set_policy;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = CONNECTION_POLICY_TABLE_SIZE;
    }

    @id(P4INFO_ID_CLASSIFY_FLOW)
    table flow_policy {
        key = {
            hdr.wire.ipv4.src_addr: ternary @name("src_addr");
            hdr.wire.ipv4.dst_addr: ternary @name("dst_addr");
            hdr.wire.ipv4.protocol: ternary @name("protocol");
            md.l4_src_port: ternary @name("src_port");
            md.l4_dst_port: ternary @name("dst_port");
        }
        actions = {
            set_policy;
        }
        default_action = set_policy(DEFAULT_POLICY);
        size = FLOW_POLICY_TABLE_SIZE;
    }

    apply {
        bool by_connection = false;
        if (hdr.wire.tng_flow.isValid()) {
            by_connection = connection_policy.apply().hit;
        }
        if (!by_connection) {
            flow_policy.apply();
        }
        policy_packets.count((bit<32>)md.policy);

        if (!md.injected) {
            bit<32> cell_a;
            bit<32> cell_b;
            hash(cell_a, HashAlgorithm.crc32, 32w0,
                 { hdr.wire.ipv4.src_addr, hdr.wire.ipv4.dst_addr, hdr.wire.ipv4.protocol, md.l4_src_port,
                   md.l4_dst_port },
                 (bit<32>)SEEN_FLOW_CELLS);
            hash(cell_b, HashAlgorithm.crc16, 32w0,
                 { hdr.wire.ipv4.src_addr, hdr.wire.ipv4.dst_addr, hdr.wire.ipv4.protocol, md.l4_src_port,
                   md.l4_dst_port },
                 (bit<32>)SEEN_FLOW_CELLS);
            bit<1> seen_a;
            bit<1> seen_b;
            seen_flows_a.read(seen_a, cell_a);
            seen_flows_b.read(seen_b, cell_b);
            if (seen_a == 0 || seen_b == 0) {
                seen_flows_a.write(cell_a, 1);
                seen_flows_b.write(cell_b, 1);
                bit<64> connection_id = 0;
                if (hdr.wire.tng_flow.isValid()) {
                    connection_id = hdr.wire.tng_flow.connection_id;
                }
                digest<new_flow_digest_t>(1, { hdr.wire.ipv4.src_addr, hdr.wire.ipv4.dst_addr,
                                               hdr.wire.ipv4.protocol, md.l4_src_port, md.l4_dst_port,
                                               std_md.ingress_port, md.policy, connection_id });
            }
        }
    }
}

#endif  // TNG_V1MODEL_CLASSIFY_P4
