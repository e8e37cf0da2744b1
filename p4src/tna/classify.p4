/*
 * TNA: flow -> policy and the new-flow digest, as v1model/classify.p4, in two controls: the policy lookups and the
 * digest's fields run on every packet beside the checks, the rest once the packet is accepted. The seen-flow bit arrays are one
 * RegisterAction each (test and set in one access); the digest is packed by the ingress deparser (pipeline_io.p4)
 * from md.new_flow when ingress sets digest_type.
 */
#ifndef TNG_TNA_CLASSIFY_P4
#define TNG_TNA_CLASSIFY_P4

#include <core.p4>
#include <tna.p4>

#include "shared/pipeline_header.p4"
#include "shared/size.p4"
#include "tna/header.p4"

control Classify(inout tng_headers_t hdr,
                 inout tng_metadata_t md,
                 in ingress_intrinsic_metadata_t ig_intr_md,
                 out new_flow_digest_t new_flow) {
    action set_policy(policy_id_t policy) {
        md.policy = policy;
    }

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
        /* What a digest of this flow would carry, filled before the verdict: only the decision to send it
         * (digest_type, NewFlows) waits for the seen-flow bits. */
        bit<64> connection_id = 0;
        if (hdr.wire.tng_flow.isValid()) {
            connection_id = hdr.wire.tng_flow.connection_id;
        }
        new_flow = {hdr.wire.ipv4.src_addr, hdr.wire.ipv4.dst_addr, hdr.wire.ipv4.protocol, md.l4_src_port,
                    md.l4_dst_port, ig_intr_md.ingress_port, md.policy, connection_id};
    }
}

/* The part of v1model's Classify that keeps state, applied once the packet's verdict is known (Tofino places a block
 * no earlier than what any of its statements waits for, so the lookups above are a control of their own). Its
 * objects keep the names of v1model's (ingress.classify.*). */
control NewFlows(in tng_headers_t hdr,
                 in tng_metadata_t md,
                 inout ingress_intrinsic_metadata_for_deparser_t dprsr_md) {
    @name(".ingress.classify.policy_packets")
    Counter<bit<64>, policy_id_t>(POLICY_COUNT, CounterType_t.PACKETS_AND_BYTES) policy_packets;
    @name(".ingress.classify.seen_flows_a")
    Register<bit<8>, bit<16>>(SEEN_FLOW_CELLS, 0) seen_flows_a;
    @name(".ingress.classify.seen_flows_b")
    Register<bit<8>, bit<16>>(SEEN_FLOW_CELLS, 0) seen_flows_b;
    Hash<bit<16>>(HashAlgorithm_t.CRC32) cell_hash_a;
    Hash<bit<16>>(HashAlgorithm_t.CRC16) cell_hash_b;

    /* Returns the bit before setting it. */
    RegisterAction<bit<8>, bit<16>, bit<8>>(seen_flows_a) test_and_set_a = {
        void apply(inout bit<8> seen, out bit<8> before) {
            before = seen;
            seen = 1;
        }
    };
    RegisterAction<bit<8>, bit<16>, bit<8>>(seen_flows_b) test_and_set_b = {
        void apply(inout bit<8> seen, out bit<8> before) {
            before = seen;
            seen = 1;
        }
    };

    apply {
        policy_packets.count(md.policy);
        if (!md.injected) {
            bit<16> cell_a = cell_hash_a.get({hdr.wire.ipv4.src_addr, hdr.wire.ipv4.dst_addr, hdr.wire.ipv4.protocol,
                                              md.l4_src_port, md.l4_dst_port});
            bit<16> cell_b = cell_hash_b.get({hdr.wire.ipv4.src_addr, hdr.wire.ipv4.dst_addr, hdr.wire.ipv4.protocol,
                                              md.l4_src_port, md.l4_dst_port});
            bit<8> seen_a = test_and_set_a.execute(cell_a);
            bit<8> seen_b = test_and_set_b.execute(cell_b);
            if (seen_a == 0 || seen_b == 0) {
                dprsr_md.digest_type = DIGEST_TYPE_NEW_FLOW;
            }
        }
    }
}

#endif  // TNG_TNA_CLASSIFY_P4
