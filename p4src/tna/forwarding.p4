/*
 * TNA: IPv4 forwarding, as v1model/forwarding.p4: longest-prefix match on the destination picks a next hop, an LWIP
 * next hop (chosen per packet by steering.p4), the CPU port, or a drop; routed packets have their TTL decremented
 * and are dropped when it would reach 0.
 */
#ifndef TNG_TNA_FORWARDING_P4
#define TNG_TNA_FORWARDING_P4

#include <core.p4>
#include <tna.p4>

#include "shared/pipeline_header.p4"
#include "shared/size.p4"
#include "tna/pipeline_io.p4"

control Forwarding(inout tng_headers_t hdr,
                   inout tng_metadata_t md,
                   inout ingress_intrinsic_metadata_for_tm_t tm_md,
                   out drop_reason_t drop_reason) {

    action route(port_num_t port, mac_addr_t dst_mac) {
        tm_md.ucast_egress_port = port;
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
        tm_md.ucast_egress_port = TNA_CPU_PORT;
    }

    action drop() {
        drop_reason = DROP_NO_ROUTE;
    }

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

#endif  // TNG_TNA_FORWARDING_P4
