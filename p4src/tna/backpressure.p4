/*
 * TNA: queue-sharing backpressure at dequeue, as v1model/backpressure.p4. The wait is the packet's time from ingress
 * to egress (its ingress time rides in the bridged header), in units of 256 ns like every time of the TNA program, so
 * the thresholds count those units; queue_level counts 32 x 1024 ns, the nearest to the wire format's 32 us. Tofino
 * 1's own queue-wait field, deq_timedelta, has 18 bits of nanoseconds: too few for waits above 262 us. The UDP
 * checksum is rewritten by the egress deparser from the parser's residual (tna/pipeline_io.p4).
 */
#ifndef TNG_TNA_BACKPRESSURE_P4
#define TNG_TNA_BACKPRESSURE_P4

#include <core.p4>
#include <tna.p4>

#include "shared/pipeline_header.p4"
#include "shared/size.p4"

/* The queue level below is the upper half of the wait (256 ns units) x 2^9: 2^15 ns = (ns / 1024) / 2^SHIFT. */
#if TNG_QUEUE_LEVEL_SHIFT != 5
#error "tna/backpressure.p4 takes queue_level as 2^15 ns: TNG_QUEUE_LEVEL_SHIFT must be 5"
#endif

control Backpressure(inout tng_headers_t hdr,
                     inout tng_metadata_t md,
                     in egress_intrinsic_metadata_t eg_intr_md,
                     in bit<32> waited,
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

    /* The wait in queue_level's units, and saturated differences that are nonzero when the first term is larger:
     * Tofino's gateways compare fields with constants only, and an action does one operation per field. */
    bit<32> wait_over_mark = 0;      // waited - mark_above
    bit<32> wait_over_feedback = 0;  // waited - feedback_min
    bit<32> wait_shifted = 0;        // the wait x 2^9: its upper 16 bits are queue_level's units (2^7 x 256 ns)
    bit<16> own_level = 0;           // those bits (waits from 2^23 x 256 ns on are level_over_max's)
    bit<16> level_rise = 0;          // own level - old level, saturated at 0: nonzero when the own level is higher
    bit<32> level_over_max = 0;      // wait - (the wait the highest level stands for - 1): nonzero at the highest
    bit<32> hint_over_capacity = 0;  // rate hint - capacity
    bool written = false;

    @hidden
    action take_wait_margins() {
        wait_shifted = waited << 9;
        level_over_max = waited |-| (((bit<32>)TNG_QUEUE_LEVEL_MAX << (2 + TNG_QUEUE_LEVEL_SHIFT)) - 1);
        wait_over_mark = waited |-| mark_above;
        wait_over_feedback = waited |-| feedback_min;
    }

    /* Taken through the hash unit (an identity hash of the upper half, which it reads as whole bytes): an ALU shift
     * or slice into the 16-bit level would tie the bit positions of every field the wait comes from (ingress and
     * egress times) to the level's, which PHV allocation cannot satisfy. */
    Hash<bit<16>>(HashAlgorithm_t.IDENTITY) level_bits;

    @hidden
    action take_own_level() {
        own_level = level_bits.get({wait_shifted[31:16]});
    }

    @hidden
    action take_feedback_margins() {
        level_rise = own_level |-| hdr.wire.tng_flow.queue_level;
        hint_over_capacity = hdr.wire.tng_flow.rate_hint |-| capacity;
    }

    apply {
        udp_rewritten = false;
        if (!thresholds.apply().hit) {
            return;
        }
        take_wait_margins();
        if (wait_over_mark != 0 && (hdr.wire.ipv4.ecn == ECN_ECT0 || hdr.wire.ipv4.ecn == ECN_ECT1)) {
            hdr.wire.ipv4.ecn = ECN_CE;
            ecn_marked.count(eg_intr_md.egress_port);
        }

        if (hdr.wire.tng_flow.isValid() && wait_over_feedback != 0) {
            port_capacity.apply();
            take_own_level();
            take_feedback_margins();
            /* The level only rises (a reserved level counts as the highest); Tofino writes each field in its own
             * branch rather than through a temporary of ?: choices. */
            bit<16> old_level = hdr.wire.tng_flow.queue_level;
            if (old_level == TNG_QUEUE_LEVEL_MAX) {
                // the highest already
            } else if (old_level == TNG_QUEUE_LEVEL_RESERVED) {
                hdr.wire.tng_flow.queue_level = TNG_QUEUE_LEVEL_MAX;
                written = true;
            } else if (level_over_max != 0) {
                hdr.wire.tng_flow.queue_level = TNG_QUEUE_LEVEL_MAX;
                written = true;
            } else if (level_rise != 0) {
                hdr.wire.tng_flow.queue_level = own_level;
                written = true;
            }
            if (hint_over_capacity != 0) {
                hdr.wire.tng_flow.rate_hint = capacity;
                written = true;
            }
            if (written) {
                if (hdr.wire.udp.checksum != 0) {
                    udp_rewritten = true;
                }
                feedback_written.count(eg_intr_md.egress_port);
            }
        }
    }
}

#endif  // TNG_TNA_BACKPRESSURE_P4
