/*
 * v1model: packet steering between the two links of an LWIP next hop (VISIBLE, LWIP node), per policy:
 *   flow-hash         every packet of a 5-tuple on the link its CRC-32 picks (baseline)
 *   weighted          per packet, LTE with probability lte_weight / (lte_weight + wifi_weight)
 *   qdepl             per packet, the link whose queue drains first (queue depth / depletion rate, depths from the
 *                     egress register port_queue_depth, rates from the controller); with equal drain times (e.g.
 *                     both queues empty) LTE with probability lte_rate / (lte_rate + wifi_rate), the paper's
 *                     lambda_LTE = mu_LTE / (mu_LTE + mu_WiFi) lambda
 *   qdepl-measured    the same with the rates measured in egress (port_service_time: time per packet while
 *                     backlogged); an even split until both links have been measured
 *   lowest-rtt-first  the preferred (lower-delay) link until its queue holds more than spill_depth packets
 *   earliest-arrival  per packet, the link that would deliver it first: released after the queue ahead and its
 *                     own slot, counted from the port's last dequeue ((queue ahead + 2) x time per packet less the
 *                     time since that dequeue, at most a packet time, of which the last packet time is the link
 *                     carrying it), + the link's delay. The queue ahead is what egress last left (port_queue_depth)
 *                     plus what was steered there since; the delays and nominal times per packet come from
 *                     link_state (the controller's measurements), the time per packet from egress's own
 *                     measurement once it has one. Predicted arrival times of successive packets never decrease,
 *                     so a flow arrives nearly in order.
 *   lte-only, wifi-only
 * The chosen link's port and destination MAC become the next hop; steered packets are counted per port.
 */
#ifndef TNG_V1MODEL_STEERING_P4
#define TNG_V1MODEL_STEERING_P4

#include <core.p4>
#include <v1model.p4>

#include "shared/p4info_id.p4"
#include "shared/pipeline_header.p4"
#include "shared/size.p4"
#include "v1model/port_state.p4"

control Steering(inout tng_headers_t hdr, inout tng_metadata_t md, inout standard_metadata_t std_md) {
    @id(P4INFO_ID_STEERED)
    counter(PORT_COUNT, CounterType.packets_and_bytes) steered;

    bit<32> lte_share = 0;
    bit<32> wifi_share = 0;
    link_t preferred = LINK_LTE;
    bit<32> spill = 0;
    bit<32> lte_delay = 0;
    bit<32> wifi_delay = 0;
    bit<32> lte_packet_time = 1;
    bit<32> wifi_packet_time = 1;

    action steer_flow_hash() {}

    action steer_weighted(bit<16> lte_weight, bit<16> wifi_weight) {
        lte_share = (bit<32>)lte_weight;
        wifi_share = (bit<32>)wifi_weight;
    }

    action steer_qdepl(bit<16> lte_rate, bit<16> wifi_rate) {
        lte_share = (bit<32>)lte_rate;
        wifi_share = (bit<32>)wifi_rate;
    }

    action steer_qdepl_measured() {}

    action steer_lowest_rtt(link_t preferred_link, bit<32> spill_depth) {
        preferred = preferred_link;
        spill = spill_depth;
    }

    action steer_earliest_arrival() {}

    action steer_lte_only() {}

    action steer_wifi_only() {}

    @id(P4INFO_ID_STEERING_MODES)
    table modes {
        key = {
            md.policy: exact @name("policy");
        }
        actions = {
            steer_flow_hash;
            steer_weighted;
            steer_qdepl;
            steer_qdepl_measured;
            steer_lowest_rtt;
            steer_earliest_arrival;
            steer_lte_only;
            steer_wifi_only;
        }
        default_action = steer_flow_hash();
        size = POLICY_COUNT;
    }

    /* The state of an LWIP pair's links (keyed by its LTE port): one-way delays in us (relative ones do: only their
     * difference matters), and the time per packet (us) their rates give. */
    action set_link_state(bit<32> lte_delay_us, bit<32> wifi_delay_us, bit<32> lte_packet_us, bit<32> wifi_packet_us) {
        lte_delay = lte_delay_us;
        wifi_delay = wifi_delay_us;
        lte_packet_time = lte_packet_us;
        wifi_packet_time = wifi_packet_us;
    }

    @id(P4INFO_ID_STEERING_LINK_STATE)
    table link_state {
        key = {
            md.lte_port: exact @name("lte_port");
        }
        actions = {
            set_link_state;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = PORT_COUNT;
    }

    /* How far the port is into the slot of its next dequeue (us): the time since it last sent a packet, at most one
     * packet time. The queue ahead drains from that dequeue on, not from now: without it a slow link's predicted
     * arrival is up to a whole packet time late. 0 when egress stamped its dequeue after this packet's ingress. */
    @hidden
    action time_in_slot(in port_num_t port, in bit<32> packet_time, in bit<48> now, out bit<32> elapsed) {
        bit<48> last;
        port_last_dequeue.read(last, (bit<32>)port);
        bit<48> since_last = now > last ? now - last : 0;
        elapsed = since_last < (bit<48>)packet_time ? (bit<32>)since_last : packet_time;
    }

    /* LTE with probability lte_share / (lte_share + wifi_share); LTE when both are 0. */
    @hidden
    action pick_by_shares(out link_t link) {
        bit<32> total = lte_share + wifi_share;
        bit<32> draw = 0;
        random(draw, 32w0, total - 1);
        link = (total == 0 || draw < lte_share) ? LINK_LTE : LINK_WIFI;
    }

    apply {
        link_t link = LINK_LTE;
        bit<32> lte_depth;
        bit<32> wifi_depth;
        port_queue_depth.read(lte_depth, (bit<32>)md.lte_port);
        port_queue_depth.read(wifi_depth, (bit<32>)md.wifi_port);

        switch (modes.apply().action_run) {
            steer_flow_hash: {
                hash(link, HashAlgorithm.crc32, LINK_LTE,
                     { hdr.wire.ipv4.src_addr, hdr.wire.ipv4.dst_addr, hdr.wire.ipv4.protocol, md.l4_src_port,
                       md.l4_dst_port },
                     16w2);
            }
            steer_weighted: {
                pick_by_shares(link);
            }
            steer_qdepl: {
                /* lte_depth / lte_rate vs wifi_depth / wifi_rate, cross-multiplied. */
                bit<64> lte_drain = (bit<64>)lte_depth * (bit<64>)wifi_share;
                bit<64> wifi_drain = (bit<64>)wifi_depth * (bit<64>)lte_share;
                if (lte_drain < wifi_drain) {
                    link = LINK_LTE;
                } else if (wifi_drain < lte_drain) {
                    link = LINK_WIFI;
                } else {
                    pick_by_shares(link);
                }
            }
            steer_qdepl_measured: {
                /* Drain time = depth x time per packet; a link's rate is proportional to the other's time per
                 * packet. */
                bit<32> lte_service;
                bit<32> wifi_service;
                port_service_time.read(lte_service, (bit<32>)md.lte_port);
                port_service_time.read(wifi_service, (bit<32>)md.wifi_port);
                if (lte_service == 0 || wifi_service == 0) {
                    lte_service = 1;
                    wifi_service = 1;
                }
                bit<64> lte_drain = (bit<64>)lte_depth * (bit<64>)lte_service;
                bit<64> wifi_drain = (bit<64>)wifi_depth * (bit<64>)wifi_service;
                if (lte_drain < wifi_drain) {
                    link = LINK_LTE;
                } else if (wifi_drain < lte_drain) {
                    link = LINK_WIFI;
                } else {
                    lte_share = wifi_service;
                    wifi_share = lte_service;
                    pick_by_shares(link);
                }
            }
            steer_lowest_rtt: {
                bit<32> preferred_depth = preferred == LINK_LTE ? lte_depth : wifi_depth;
                link = preferred;
                if (preferred_depth > spill) {
                    link = preferred == LINK_LTE ? LINK_WIFI : LINK_LTE;
                }
            }
            steer_earliest_arrival: {
                link_state.apply();
                bit<32> lte_measured;
                bit<32> wifi_measured;
                port_service_time.read(lte_measured, (bit<32>)md.lte_port);
                port_service_time.read(wifi_measured, (bit<32>)md.wifi_port);
                if (lte_measured != 0) {
                    lte_packet_time = lte_measured;
                }
                if (wifi_measured != 0) {
                    wifi_packet_time = wifi_measured;
                }
                bit<32> lte_since;
                bit<32> wifi_since;
                port_steered_since_dequeue.read(lte_since, (bit<32>)md.lte_port);
                port_steered_since_dequeue.read(wifi_since, (bit<32>)md.wifi_port);
                bit<32> lte_elapsed;
                bit<32> wifi_elapsed;
                time_in_slot(md.lte_port, lte_packet_time, std_md.ingress_global_timestamp, lte_elapsed);
                time_in_slot(md.wifi_port, wifi_packet_time, std_md.ingress_global_timestamp, wifi_elapsed);
                /* Released after the queue ahead and its own slot, then one packet time on the link. */
                bit<64> lte_arrival = (bit<64>)(lte_depth + lte_since + 2) * (bit<64>)lte_packet_time
                                      - (bit<64>)lte_elapsed + (bit<64>)lte_delay;
                bit<64> wifi_arrival = (bit<64>)(wifi_depth + wifi_since + 2) * (bit<64>)wifi_packet_time
                                       - (bit<64>)wifi_elapsed + (bit<64>)wifi_delay;
                link = lte_arrival < wifi_arrival ? LINK_LTE : LINK_WIFI;
            }
            steer_wifi_only: {
                link = LINK_WIFI;
            }
            steer_lte_only: {
                link = LINK_LTE;
            }
        }

        if (link == LINK_LTE) {
            std_md.egress_spec = md.lte_port;
            hdr.wire.ethernet.dst_addr = md.lte_dst_mac;
        } else {
            std_md.egress_spec = md.wifi_port;
            hdr.wire.ethernet.dst_addr = md.wifi_dst_mac;
        }
        steered.count((bit<32>)std_md.egress_spec);
        bit<32> since;
        port_steered_since_dequeue.read(since, (bit<32>)std_md.egress_spec);
        port_steered_since_dequeue.write((bit<32>)std_md.egress_spec, since + 1);
    }
}

#endif  // TNG_V1MODEL_STEERING_P4
