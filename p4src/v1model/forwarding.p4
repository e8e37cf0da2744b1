/*
 * v1model: IPv4 forwarding. Longest-prefix match on the destination picks a next hop (port and destination MAC), an
 * LWIP next hop (a pair of LTE and Wi-Fi links, chosen per packet by steering.p4), the CPU port, or a drop. Routed
 * packets have their TTL decremented and are dropped when it would reach 0.
 */
#ifndef TNG_V1MODEL_FORWARDING_P4
#define TNG_V1MODEL_FORWARDING_P4

#include <core.p4>
#include <v1model.p4>

#include "shared/p4info_id.p4"
#include "shared/pipeline_header.p4"
#include "shared/size.p4"

control Forwarding(inout tng_headers_t hdr,
                   inout tng_metadata_t md,
                   inout standard_metadata_t std_md,
                   out drop_reason_t drop_reason) {

    action route(port_num_t port, mac_addr_t dst_mac) {
        std_md.egress_spec = port;
        hdr.wire.ethernet.dst_addr = dst_mac;
        md.routed = true;
    }

    action route_lwip(port_num_t lte_port, mac_addr_t lte_dst_mac, port_num_t wifi_port, mac_addr_t wifi_dst_mac) {
        md.lte_port = lte_port;
        md.lte_dst_mac = lte_dst_mac;
        md.wifi_port = wifi_port;
        md.wifi_dst_mac = wifi_dst_mac;
        md.lwip = true;
        md.routed = true;
    }

    action punt() {
        std_md.egress_spec = CPU_PORT;
    }

    action drop() {
        drop_reason = DROP_NO_ROUTE;
    }

    @id(P4INFO_ID_FORWARDING_ROUTES)
    table routes {
        key = {
            hdr.wire.ipv4.dst_addr: lpm @name("dst_addr");
        }
        actions = {
            route;
            route_lwip;
            punt;
            drop;
        }
        default_action = drop();
        size = ROUTES_TABLE_SIZE;
    }

    apply {
        drop_reason = DROP_REASON_NONE;
        routes.apply();
        if (md.routed) {
            if (hdr.wire.ipv4.ttl <= 1) {
                drop_reason = DROP_TTL_EXPIRED;
            } else {
                hdr.wire.ipv4.ttl = hdr.wire.ipv4.ttl - 1;
            }
        }
    }
}

#endif  // TNG_V1MODEL_FORWARDING_P4
