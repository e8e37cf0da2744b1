/*
 * TNA only: egress reports each LWIP link's queueing time to ingress, where steering compares the links. v1model's
 * steering reads egress's queue registers directly; Tofino's ingress cannot read egress registers, and a stateful ALU
 * (two 32-bit inputs) cannot keep the virtual per-link clocks that would replace them: a link's free time needs the
 * time now and the link's time per packet, and choosing between two links needs both links' times per packet. So
 * egress mirrors a small report (queue_report_t) to the recirculation port for ports the controller lists here, at
 * most one per report interval per port, and ingress stores the latest one per link (tna/steering.p4).
 * The queueing time is the ingress-to-egress time of the packet just sent, in 256 ns units (its ingress time rides
 * in the bridged header): Tofino 1's enq_tstamp and deq_timedelta have 18 bits of nanoseconds, too few for the tens
 * of milliseconds an LTE queue holds. The report is filled here and mirrored by the egress control, unless VISIBLE
 * mirrors the same packet to its helper (one mirror per packet): that report is skipped, the next one comes an
 * interval later.
 */
#ifndef TNG_TNA_QUEUE_REPORT_P4
#define TNG_TNA_QUEUE_REPORT_P4

#include <core.p4>
#include <tna.p4>

#include "shared/arith.p4"
#include "shared/size.p4"
#include "tna/header.p4"

control ReportQueueDelay(in egress_intrinsic_metadata_t eg_intr_md,
                         in bit<32> now,
                         in bit<32> ingress_time,
                         out queue_report_t report,
                         out bit<1> due) {
    /* When the port last reported. */
    Register<bit<32>, port_num_t>(PORT_COUNT, 0) last_report;
    bit<32> interval = 0;
    bit<1> reporting = 0;   // the port is in queue_reports
    /* The latest report time that is still too recent; computed before the RegisterAction, whose adds take a
     * register operand first (not now + interval). */
    bit<32> recent_since = 0;

    @hidden
    action take_recent_since() {
        recent_since = now - interval;
    }

    /* interval_us counts 256 ns units, as every time of the TNA program (tna/tng.p4). */
    action report_every(bit<32> interval_us) {
        interval = interval_us;
        reporting = 1;
    }

    table queue_reports {
        key = {
            eg_intr_md.egress_port: exact @name("egress_port");
        }
        actions = {
            report_every;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = PORT_COUNT;
    }

    /* Returns 1 when a report is due (the last one is an interval old), and stamps it. */
    RegisterAction<bit<32>, port_num_t, bit<1>>(last_report) take_turn = {
        void apply(inout bit<32> last, out bit<1> turn) {
            if (seq_before(recent_since, last)) {
                turn = 0;
            } else {
                last = now;
                turn = 1;
            }
        }
    };

    /* Conditions only around the register and the report's fields, not over the whole: this way its lookup and
     * arithmetic are tables of no condition, which placement puts in the stages VISIBLE's chain leaves free (nested
     * under the hit, the same program needs two stages more). */
    apply {
        report.setInvalid();
        due = 0;
        queue_reports.apply();
        take_recent_since();
        if (reporting == 1) {
            due = take_turn.execute(eg_intr_md.egress_port);
        }
        if (due == 1) {
            report.setValid();
            report.kind = BRIDGE_KIND_QUEUE_REPORT;
            report._pad = 0;
            report.port = eg_intr_md.egress_port;
            report.queue_delay = now - ingress_time;
        }
    }
}

#endif  // TNG_TNA_QUEUE_REPORT_P4
