/*
 * v1model: queue-sharing backpressure at dequeue (Tng section 4.3: the switch's queue acts as the last router of the
 * section that feeds it). For a policy with thresholds, a packet that waited in the egress queue
 *   longer than ecn_mark_us: ECN CE if its IPv4 ECN field is ECT(0) or ECT(1);
 *   longer than feedback_min_us, if it is tng: queue_level := max(queue_level, waited >> 5) (32 us units, at most
 *     65534) and rate_hint := min(rate_hint, the port's capacity in kbit/s), UDP checksum updated (RFC 1624; a zero
 *     checksum means "none" and stays zero).
 * A packet that did not wait past the thresholds leaves with its feedback fields untouched.
 */
#ifndef TNG_V1MODEL_BACKPRESSURE_P4
#define TNG_V1MODEL_BACKPRESSURE_P4

#include <core.p4>
#include <v1model.p4>

#include "shared/arith.p4"
#include "shared/p4info_id.p4"
#include "shared/pipeline_header.p4"
#include "shared/size.p4"

control Backpressure(inout tng_headers_t hdr, inout tng_metadata_t md, inout standard_metadata_t std_md) {
    @id(P4INFO_ID_FEEDBACK_WRITTEN)
    counter(PORT_COUNT, CounterType.packets) feedback_written;
    @id(P4INFO_ID_ECN_MARKED)
    counter(PORT_COUNT, CounterType.packets) ecn_marked;

    bit<32> feedback_min = 0;
    bit<32> mark_above = 0;
    bit<32> capacity = 0xffffffff;

    action set_thresholds(bit<32> feedback_min_us, bit<32> ecn_mark_us) {
        feedback_min = feedback_min_us;
        mark_above = ecn_mark_us;
    }

    @id(P4INFO_ID_BACKPRESSURE_THRESHOLDS)
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

    @id(P4INFO_ID_BACKPRESSURE_PORT_CAPACITY)
    table port_capacity {
        key = {
            std_md.egress_port: exact @name("egress_port");
        }
        actions = {
            set_capacity;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = PORT_COUNT;
    }

    apply {
        if (!thresholds.apply().hit) {
            return;
        }
        bit<32> waited = (bit<32>)std_md.deq_timedelta;

        if (waited > mark_above && (hdr.wire.ipv4.ecn == ECN_ECT0 || hdr.wire.ipv4.ecn == ECN_ECT1)) {
            hdr.wire.ipv4.ecn = ECN_CE;
            ecn_marked.count((bit<32>)std_md.egress_port);
        }

        if (hdr.wire.tng_flow.isValid() && waited > feedback_min) {
            port_capacity.apply();
            bit<32> own_level = waited >> TNG_QUEUE_LEVEL_SHIFT;
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
                if (hdr.wire.udp.checksum != 0) {
                    bit<16> checksum = checksum_update(hdr.wire.udp.checksum, old_level ++ old_rate, level ++ rate);
                    hdr.wire.udp.checksum = checksum == 0 ? 16w0xffff : checksum;
                }
                feedback_written.count((bit<32>)std_md.egress_port);
            }
        }
    }
}

#endif  // TNG_V1MODEL_BACKPRESSURE_P4
