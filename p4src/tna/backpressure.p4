/*
 * TNA: queue-sharing backpressure at dequeue, as v1model/backpressure.p4. The wait is Tofino's deq_timedelta (ns),
 * taken in units of 256 ns like every time of the TNA program, so the thresholds count those units; queue_level
 * counts 32 x 1024 ns, the nearest to the wire format's 32 us. Tofino 1's deq_timedelta is 18 bits: waits from 262 us on read as their remainder modulo
 * 262144 ns. The UDP checksum is rewritten by the egress deparser from the parser's residual (tna/pipeline_io.p4).
 */
#ifndef TNG_TNA_BACKPRESSURE_P4
#define TNG_TNA_BACKPRESSURE_P4

#include <core.p4>
#include <tna.p4>

#include "shared/pipeline_header.p4"
#include "shared/size.p4"

control Backpressure(inout tng_headers_t hdr,
                     inout tng_metadata_t md,
                     in egress_intrinsic_metadata_t eg_intr_md,
                     out bool udp_rewritten) {
    Counter<bit<64>, port_num_t>(PORT_COUNT, CounterType_t.PACKETS) feedback_written;
    Counter<bit<64>, port_num_t>(PORT_COUNT, CounterType_t.PACKETS) ecn_marked;

    bit<32> feedback_min = 0;
    bit<32> mark_above = 0;
    bit<32> capacity = 0xffffffff;

    action set_thresholds(bit<32> feedback_min_us, bit<32> ecn_mark_us) {
        feedback_min = feedback_min_us;
        mark_above = ecn_mark_us;
    }

    table thresholds {
        key = {
            md.policy: exact @name("policy");
        }
        actions = {
            set_thresholds;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = POLICY_COUNT;
    }

    action set_capacity(bit<32> rate_kbps) {
        capacity = rate_kbps;
    }

    table port_capacity {
        key = {
            eg_intr_md.egress_port: exact @name("egress_port");
        }
        actions = {
            set_capacity;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = PORT_COUNT;
    }

    apply {
        udp_rewritten = false;
        if (!thresholds.apply().hit) {
            return;
        }
        bit<32> waited = (bit<32>)(eg_intr_md.deq_timedelta >> 8);

        if (waited > mark_above && (hdr.wire.ipv4.ecn == ECN_ECT0 || hdr.wire.ipv4.ecn == ECN_ECT1)) {
            hdr.wire.ipv4.ecn = ECN_CE;
            ecn_marked.count(eg_intr_md.egress_port);
        }

        if (hdr.wire.tng_flow.isValid() && waited > feedback_min) {
            port_capacity.apply();
            bit<32> own_level = (bit<32>)(eg_intr_md.deq_timedelta >> 10) >> TNG_QUEUE_LEVEL_SHIFT;
            bit<16> old_level = hdr.wire.tng_flow.queue_level;
            bit<16> level = old_level == TNG_QUEUE_LEVEL_RESERVED ? TNG_QUEUE_LEVEL_MAX : old_level;
            if (own_level >= (bit<32>)TNG_QUEUE_LEVEL_MAX) {
                level = TNG_QUEUE_LEVEL_MAX;
            } else if (own_level[15:0] > level) {
                level = own_level[15:0];
            }
            bit<32> old_rate = hdr.wire.tng_flow.rate_hint;
            bit<32> rate = capacity < old_rate ? capacity : old_rate;
            if (level != old_level || rate != old_rate) {
                hdr.wire.tng_flow.queue_level = level;
                hdr.wire.tng_flow.rate_hint = rate;
                udp_rewritten = hdr.wire.udp.checksum != 0;
                feedback_written.count(eg_intr_md.egress_port);
            }
        }
    }
}

#endif  // TNG_TNA_BACKPRESSURE_P4
