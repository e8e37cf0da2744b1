/*
 * TNA: per-port queue state recorded in egress, as v1model/port_state.p4, in Tofino's units: depths in 80-byte cells
 * (Tofino 1), times in 256 ns units (global_tstamp bits 39:8, as ingress's). Tofino's ingress cannot read registers
 * of egress (each belongs to one stage of one gress), so unlike v1model these are for the control plane to read;
 * steering learns the queues from egress's queue reports (tna/queue_report.p4).
 */
#ifndef TNG_TNA_PORT_STATE_P4
#define TNG_TNA_PORT_STATE_P4

#include <core.p4>
#include <tna.p4>

#include "shared/size.p4"

control RecordPortState(in egress_intrinsic_metadata_t eg_intr_md, in bit<32> now) {
    /* Cells left in the port's queue when it last sent a packet. */
    Register<bit<32>, port_num_t>(PORT_COUNT, 0) port_queue_depth;
    /* The last gap between dequeues of packets that found a queue. v1model keeps an EWMA of them; a stateful ALU
     * does one operation per value, and the EWMA's step is two (difference, shifted, added): the control plane
     * smooths the samples it reads. */
    Register<bit<32>, port_num_t>(PORT_COUNT, 0) port_service_time;
    Register<bit<32>, port_num_t>(PORT_COUNT, 0) port_last_dequeue;

    RegisterAction<bit<32>, port_num_t, bit<32>>(port_queue_depth) record_depth = {
        void apply(inout bit<32> depth) {
            depth = (bit<32>)eg_intr_md.deq_qdepth;
        }
    };

    /* Returns the time since the previous dequeue, 0 if there was none. */
    RegisterAction<bit<32>, port_num_t, bit<32>>(port_last_dequeue) stamp_dequeue = {
        void apply(inout bit<32> last, out bit<32> elapsed) {
            elapsed = last == 0 ? 32w0 : now - last;
            last = now;
        }
    };

    bit<32> gap = 0;

    RegisterAction<bit<32>, port_num_t, bit<32>>(port_service_time) record_gap = {
        void apply(inout bit<32> service) {
            service = gap;
        }
    };

    apply {
        record_depth.execute(eg_intr_md.egress_port);
        gap = stamp_dequeue.execute(eg_intr_md.egress_port);
        if (eg_intr_md.enq_qdepth > 0 && gap != 0) {
            record_gap.execute(eg_intr_md.egress_port);
        }
    }
}

#endif  // TNG_TNA_PORT_STATE_P4
