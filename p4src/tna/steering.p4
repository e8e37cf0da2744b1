/*
 * TNA: packet steering between the two links of an LWIP next hop, the modes of v1model/steering.p4 with Tofino's
 * means. v1model reads egress's queue registers; Tofino's ingress cannot, so egress reports each link's queueing time
 * (tna/queue_report.p4) and steering keeps the latest report of each link in a register per link, indexed by the
 * pair's LTE port: a report writes one, the modes that compare the links read both (two stateful ALUs side by side;
 * one cannot compare its two halves) and compare them in the MAU.
 * Times are in units of 256 ns ("us" below), queueing times as reported (ingress to egress of the last packet sent).
 *   flow-hash         CRC-32 of the 5-tuple (Hash<>)
 *   weighted          per packet, LTE if a 16-bit Random<> draw is below lte_fraction (the share of 65536)
 *   qdepl             the link with the shorter queueing time; on a tie, as weighted
 *   qdepl-measured    as qdepl with an even split on ties (the rates egress measures are not readable here)
 *   lowest-rtt-first  the preferred link until its queueing time exceeds spill_backlog
 *   earliest-arrival  the link whose queueing time + time per packet + delay is smaller (Wi-Fi on a tie)
 *   lte-only, wifi-only
 * Unlike v1model, the packets steered since a link's last report do not count: reports come every report interval
 * (the controller's queue_reports table), and between two reports the compared times stand still.
 */
#ifndef TNG_TNA_STEERING_P4
#define TNG_TNA_STEERING_P4

#include <core.p4>
#include <tna.p4>

#include "shared/pipeline_header.p4"
#include "shared/size.p4"

control Steering(inout tng_headers_t hdr,
                 inout tng_metadata_t md,
                 inout ingress_intrinsic_metadata_for_tm_t tm_md,
                 in queue_report_t report) {
    Counter<bit<64>, port_num_t>(PORT_COUNT, CounterType_t.PACKETS_AND_BYTES) steered;
    Register<bit<32>, port_num_t>(PORT_COUNT, 0) lte_queue_delay;   // the LTE link's last reported queueing time
    Register<bit<32>, port_num_t>(PORT_COUNT, 0) wifi_queue_delay;
    Hash<bit<1>>(HashAlgorithm_t.CRC32) flow_hash;
    Random<bit<16>>() draw;

    bit<16> lte_fraction = 0x8000;
    link_t preferred = LINK_LTE;
    bit<32> spill = 0;
    bit<32> lte_delay = 0;
    bit<32> wifi_delay = 0;
    bit<32> lte_packet_time = 1;
    bit<32> wifi_packet_time = 1;
    /* What a decision compares the links' queueing times with; the times read; their margin past the bound, whose
     * sign (bit 31) decides (Tofino's gateways compare fields with constants only; one operation per action). */
    bit<32> bound = 0;
    bit<32> lte_delay_now = 0;
    bit<32> wifi_delay_now = 0;
    bit<32> margin = 0;

    @hidden
    action take_delay_difference() {
        margin = lte_delay_now - wifi_delay_now;
    }

    @hidden
    action take_margin_past_bound() {
        margin = margin - bound;
    }

    @hidden
    action take_bound_less_lte() {
        margin = bound - lte_delay_now;
    }

    @hidden
    action take_bound_less_wifi() {
        margin = bound - wifi_delay_now;
    }

    /* A 16-bit draw, and its difference with the LTE share: negative (bit 31) when the draw falls below it. Tofino's
     * gateways compare fields with constants only. */
    bit<32> random_draw = 0;
    bit<32> draw_below_fraction = 0;

    @hidden
    action take_draw_below_fraction() {
        draw_below_fraction = random_draw - (bit<32>)lte_fraction;
    }

    /* Earliest-arrival's terms besides the queueing times. */
    bit<32> wifi_terms = 0;
    bit<32> lte_terms = 0;

    /* An action per step: a Tofino action runs in one stage, and each of its fields takes one operation. */
    @hidden
    action sum_earliest_terms() {
        wifi_terms = wifi_packet_time + wifi_delay;
        lte_terms = lte_packet_time + lte_delay;
    }

    @hidden
    action bound_by_earliest_terms() {
        bound = wifi_terms - lte_terms;
    }

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

    /* The LWIP pair of a reporting port, and which of its links the port is. */
    port_num_t report_pair = 0;
    bool report_is_lte = false;

    action report_lte_of(port_num_t lte_port) {
        report_pair = lte_port;
        report_is_lte = true;
    }

    action report_wifi_of(port_num_t lte_port) {
        report_pair = lte_port;
        report_is_lte = false;
    }

    table queue_report_links {
        key = {
            report.port: exact @name("port");
        }
        actions = {
            report_lte_of;
            report_wifi_of;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = PORT_COUNT;
    }

    RegisterAction<bit<32>, port_num_t, bit<32>>(lte_queue_delay) record_lte_delay = {
        void apply(inout bit<32> delay) {
            delay = report.queue_delay;
        }
    };

    RegisterAction<bit<32>, port_num_t, bit<32>>(lte_queue_delay) read_lte_delay = {
        void apply(inout bit<32> delay, out bit<32> value) {
            value = delay;
        }
    };

    RegisterAction<bit<32>, port_num_t, bit<32>>(wifi_queue_delay) record_wifi_delay = {
        void apply(inout bit<32> delay) {
            delay = report.queue_delay;
        }
    };

    RegisterAction<bit<32>, port_num_t, bit<32>>(wifi_queue_delay) read_wifi_delay = {
        void apply(inout bit<32> delay, out bit<32> value) {
            value = delay;
        }
    };

    apply {
        if (report.isValid()) {
            if (queue_report_links.apply().hit) {
                if (report_is_lte) {
                    record_lte_delay.execute(report_pair);
                } else {
                    record_wifi_delay.execute(report_pair);
                }
            }
            return;
        }
        link_t link = LINK_LTE;
        bool compare = false;
        bool spill_check = false;
        link_state.apply();
        random_draw = (bit<32>)draw.get();
        switch (modes.apply().action_run) {
            steer_flow_hash: {
                link = (link_t)flow_hash.get({hdr.wire.ipv4.src_addr, hdr.wire.ipv4.dst_addr, hdr.wire.ipv4.protocol,
                                              md.l4_src_port, md.l4_dst_port});
            }
            steer_weighted: {
                take_draw_below_fraction();
                if (draw_below_fraction[31:31] == 0) {
                    link = LINK_WIFI;
                }
            }
            steer_qdepl: {
                take_draw_below_fraction();
                if (draw_below_fraction[31:31] == 1) {
                    bound = 1;
                }
                compare = true;
            }
            steer_qdepl_measured: {
                if (random_draw < 0x8000) {
                    bound = 1;
                }
                compare = true;
            }
            steer_lowest_rtt: {
                bound = spill;
                spill_check = true;
            }
            steer_earliest_arrival: {
                sum_earliest_terms();
                bound_by_earliest_terms();
                compare = true;
            }
            steer_wifi_only: {
                link = LINK_WIFI;
            }
            steer_lte_only: {
                link = LINK_LTE;
            }
        }

        if (compare || spill_check) {
            lte_delay_now = read_lte_delay.execute(md.lte_port);
            wifi_delay_now = read_wifi_delay.execute(md.lte_port);
        }
        /* LTE when its queueing time less Wi-Fi's is below the bound: the difference of the links' other terms
         * (earliest-arrival), or 1 when a tie goes to LTE and 0 when it goes to Wi-Fi (qdepl). */
        if (compare) {
            take_delay_difference();
            take_margin_past_bound();
            if (margin[31:31] == 1) {
                link = LINK_LTE;
            } else {
                link = LINK_WIFI;
            }
        }
        /* Lowest-rtt-first: the preferred link while its queueing time is within the bound (spill_backlog). */
        if (spill_check) {
            if (preferred == LINK_LTE) {
                take_bound_less_lte();
                if (margin[31:31] == 1) {
                    link = LINK_WIFI;
                }
            } else {
                link = LINK_WIFI;
                take_bound_less_wifi();
                if (margin[31:31] == 1) {
                    link = LINK_LTE;
                }
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
