/*
 * TNA: packet steering between the two links of an LWIP next hop, the modes of v1model/steering.p4 with Tofino's
 * means. Ingress cannot read egress's queue registers on Tofino, so steering keeps its own view of the two queues of
 * each LWIP pair, in one register cell indexed by the pair's LTE port: the time at which each link will have sent
 * everything steered to it so far (a virtual clock: a packet steered to a link moves that time to
 * max(it, now) + the link's time per packet from link_state). A link's backlog is that time less now: its drain
 * time, which is what the queue-depth modes compare (v1model: depth / rate). Every mode updates the cell with one
 * RegisterAction; the modes that compare the two links decide inside it, so a packet touches the register once.
 * Times are in units of 256 ns ("us" below, ingress global_tstamp bits 39:8), compared modulo 2^32.
 *   flow-hash         CRC-32 of the 5-tuple (Hash<>)
 *   weighted          per packet, LTE if a 16-bit Random<> draw is below lte_fraction (the share of 65536)
 *   qdepl             the link with the smaller backlog; on a tie, as weighted
 *   qdepl-measured    as qdepl with an even split on ties (the rates egress measures are not readable here)
 *   lowest-rtt-first  the preferred link until its backlog exceeds spill_backlog
 *   earliest-arrival  the link whose max(free time, now) + time per packet + delay is earlier (Wi-Fi on a tie)
 *   lte-only, wifi-only
 */
#ifndef TNG_TNA_STEERING_P4
#define TNG_TNA_STEERING_P4

#include <core.p4>
#include <tna.p4>

#include "shared/arith.p4"
#include "shared/pipeline_header.p4"
#include "shared/size.p4"

struct link_free_at_t {
    bit<32> lte;   // when the LTE link will have sent what was steered to it
    bit<32> wifi;
}

control Steering(inout tng_headers_t hdr,
                 inout tng_metadata_t md,
                 inout ingress_intrinsic_metadata_for_tm_t tm_md,
                 in bit<32> now) {
    Counter<bit<64>, port_num_t>(PORT_COUNT, CounterType_t.PACKETS_AND_BYTES) steered;
    Register<link_free_at_t, port_num_t>(PORT_COUNT, {0, 0}) link_free_at;
    Hash<bit<1>>(HashAlgorithm_t.CRC32) flow_hash;
    Random<bit<16>>() draw;

    bit<16> lte_fraction = 0x8000;
    link_t preferred = LINK_LTE;
    bit<32> spill = 0;
    bit<32> lte_delay = 0;
    bit<32> wifi_delay = 0;
    bit<32> lte_packet_time = 1;
    bit<32> wifi_packet_time = 1;
    /* The link a random draw picks (weighted mode, and ties of the qdepl modes). */
    link_t drawn = LINK_LTE;

    action steer_flow_hash() {}

    action steer_weighted(bit<16> lte_fraction_of_65536) {
        lte_fraction = lte_fraction_of_65536;
    }

    action steer_qdepl(bit<16> lte_fraction_of_65536) {
        lte_fraction = lte_fraction_of_65536;
    }

    action steer_qdepl_measured() {}

    action steer_lowest_rtt(link_t preferred_link, bit<32> spill_backlog_us) {
        preferred = preferred_link;
        spill = spill_backlog_us;
    }

    action steer_earliest_arrival() {}

    action steer_lte_only() {}

    action steer_wifi_only() {}

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

    action set_link_state(bit<32> lte_delay_us, bit<32> wifi_delay_us, bit<32> lte_packet_us, bit<32> wifi_packet_us) {
        lte_delay = lte_delay_us;
        wifi_delay = wifi_delay_us;
        lte_packet_time = lte_packet_us;
        wifi_packet_time = wifi_packet_us;
    }

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

    /* The link chosen outside the register: only the chosen link's free time moves. */
    RegisterAction<link_free_at_t, port_num_t, link_t>(link_free_at) charge_lte = {
        void apply(inout link_free_at_t free_at, out link_t link) {
            free_at.lte = (seq_before(free_at.lte, now) ? now : free_at.lte) + lte_packet_time;
            link = LINK_LTE;
        }
    };

    RegisterAction<link_free_at_t, port_num_t, link_t>(link_free_at) charge_wifi = {
        void apply(inout link_free_at_t free_at, out link_t link) {
            free_at.wifi = (seq_before(free_at.wifi, now) ? now : free_at.wifi) + wifi_packet_time;
            link = LINK_WIFI;
        }
    };

    /* The smaller backlog (drain time); the drawn link on a tie, e.g. both idle. */
    RegisterAction<link_free_at_t, port_num_t, link_t>(link_free_at) steer_by_backlog = {
        void apply(inout link_free_at_t free_at, out link_t link) {
            bit<32> lte_start = seq_before(free_at.lte, now) ? now : free_at.lte;
            bit<32> wifi_start = seq_before(free_at.wifi, now) ? now : free_at.wifi;
            if (seq_before(lte_start, wifi_start) || (lte_start == wifi_start && drawn == LINK_LTE)) {
                free_at.lte = lte_start + lte_packet_time;
                link = LINK_LTE;
            } else {
                free_at.wifi = wifi_start + wifi_packet_time;
                link = LINK_WIFI;
            }
        }
    };

    /* The preferred link until its backlog exceeds the spill threshold. */
    RegisterAction<link_free_at_t, port_num_t, link_t>(link_free_at) steer_lowest_rtt_first = {
        void apply(inout link_free_at_t free_at, out link_t link) {
            bit<32> lte_start = seq_before(free_at.lte, now) ? now : free_at.lte;
            bit<32> wifi_start = seq_before(free_at.wifi, now) ? now : free_at.wifi;
            bool spill_lte = preferred == LINK_LTE && lte_start - now > spill;
            bool spill_wifi = preferred == LINK_WIFI && wifi_start - now > spill;
            if ((preferred == LINK_LTE && !spill_lte) || spill_wifi) {
                free_at.lte = lte_start + lte_packet_time;
                link = LINK_LTE;
            } else {
                free_at.wifi = wifi_start + wifi_packet_time;
                link = LINK_WIFI;
            }
        }
    };

    /* Delivered after the link's backlog, its own packet time and the link's delay. */
    RegisterAction<link_free_at_t, port_num_t, link_t>(link_free_at) steer_earliest = {
        void apply(inout link_free_at_t free_at, out link_t link) {
            bit<32> lte_done = (seq_before(free_at.lte, now) ? now : free_at.lte) + lte_packet_time;
            bit<32> wifi_done = (seq_before(free_at.wifi, now) ? now : free_at.wifi) + wifi_packet_time;
            if (seq_before(lte_done + lte_delay, wifi_done + wifi_delay)) {
                free_at.lte = lte_done;
                link = LINK_LTE;
            } else {
                free_at.wifi = wifi_done;
                link = LINK_WIFI;
            }
        }
    };

    apply {
        link_t link = LINK_LTE;
        link_state.apply();
        bit<16> random_draw = draw.get();
        switch (modes.apply().action_run) {
            steer_flow_hash: {
                link = (link_t)flow_hash.get({hdr.wire.ipv4.src_addr, hdr.wire.ipv4.dst_addr, hdr.wire.ipv4.protocol,
                                              md.l4_src_port, md.l4_dst_port});
                if (link == LINK_LTE) {
                    charge_lte.execute(md.lte_port);
                } else {
                    charge_wifi.execute(md.lte_port);
                }
            }
            steer_weighted: {
                if (random_draw < lte_fraction) {
                    link = charge_lte.execute(md.lte_port);
                } else {
                    link = charge_wifi.execute(md.lte_port);
                }
            }
            steer_qdepl: {
                drawn = random_draw < lte_fraction ? LINK_LTE : LINK_WIFI;
                link = steer_by_backlog.execute(md.lte_port);
            }
            steer_qdepl_measured: {
                drawn = random_draw < 0x8000 ? LINK_LTE : LINK_WIFI;
                link = steer_by_backlog.execute(md.lte_port);
            }
            steer_lowest_rtt: {
                link = steer_lowest_rtt_first.execute(md.lte_port);
            }
            steer_earliest_arrival: {
                link = steer_earliest.execute(md.lte_port);
            }
            steer_wifi_only: {
                link = charge_wifi.execute(md.lte_port);
            }
            steer_lte_only: {
                link = charge_lte.execute(md.lte_port);
            }
        }

        if (link == LINK_LTE) {
            tm_md.ucast_egress_port = md.lte_port;
            hdr.wire.ethernet.dst_addr = md.lte_dst_mac;
        } else {
            tm_md.ucast_egress_port = md.wifi_port;
            hdr.wire.ethernet.dst_addr = md.wifi_dst_mac;
        }
        steered.count(tm_md.ucast_egress_port);
    }
}

#endif  // TNG_TNA_STEERING_P4
