/*
 * v1model: per-port queue state shared by egress (writer) and ingress (readers: steering, VISIBLE). BMv2 lets both
 * pipelines use a register declared at the top level.
 */
#ifndef TNG_V1MODEL_PORT_STATE_P4
#define TNG_V1MODEL_PORT_STATE_P4

#include <core.p4>
#include <v1model.p4>

#include "shared/size.p4"

/* Packets left in the port's egress queue when it last sent one (standard_metadata.deq_qdepth); the last packet of
 * a backlog writes 0, so an idle port reads 0. */
register<bit<32>>(PORT_COUNT) port_queue_depth;

/* The port's measured depletion rate, as the time it takes to send one packet (us): an EWMA (weight
 * 2^-PORT_SERVICE_EWMA_SHIFT) of the gaps between consecutive dequeues of packets that found a queue, i.e. while
 * the port was backlogged and sending as fast as its link allows. 0 until measured. */
register<bit<32>>(PORT_COUNT) port_service_time;
register<bit<48>>(PORT_COUNT) port_last_dequeue;  // us

/* Packets steered to the port since it last sent one: with port_queue_depth, the queue a packet steered now would
 * join (deq_qdepth alone is as old as the port's last dequeue, a whole packet time on a slow link). Ingress adds,
 * egress clears at every dequeue. */
register<bit<32>>(PORT_COUNT) port_steered_since_dequeue;

/* Egress: record the queue state a packet leaves behind. */
control RecordPortState(in standard_metadata_t std_md) {
    apply {
        bit<32> port = (bit<32>)std_md.egress_port;
        bit<48> now = std_md.egress_global_timestamp;
        port_queue_depth.write(port, (bit<32>)std_md.deq_qdepth);
        port_steered_since_dequeue.write(port, 0);
        bit<48> last;
        port_last_dequeue.read(last, port);
        port_last_dequeue.write(port, now);
        if (std_md.enq_qdepth > 0 && last != 0) {
            bit<32> gap = (bit<32>)(now - last);
            bit<32> service;
            port_service_time.read(service, port);
            if (service == 0) {
                service = gap;
            } else if (gap > service) {
                service = service + ((gap - service) >> PORT_SERVICE_EWMA_SHIFT);
            } else {
                service = service - ((service - gap) >> PORT_SERVICE_EWMA_SHIFT);
            }
            port_service_time.write(port, service);
        }
    }
}

#endif  // TNG_V1MODEL_PORT_STATE_P4
