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

/* The steering modes, as the policy's action in `modes` names them. */
typedef bit<3> steering_mode_t;
const steering_mode_t STEERING_FLOW_HASH = 0;
const steering_mode_t STEERING_WEIGHTED = 1;
const steering_mode_t STEERING_QDEPL = 2;
const steering_mode_t STEERING_QDEPL_MEASURED = 3;
const steering_mode_t STEERING_LOWEST_RTT = 4;
const steering_mode_t STEERING_EARLIEST_ARRIVAL = 5;
const steering_mode_t STEERING_LTE_ONLY = 6;
const steering_mode_t STEERING_WIFI_ONLY = 7;
/* A negative 32-bit difference, as a ternary value and mask. */
#define LTE_SHORTER 0x80000000 &&& 0x80000000

control Steering(inout tng_headers_t hdr,
                 inout tng_metadata_t md,
                 inout ingress_intrinsic_metadata_for_tm_t tm_md,
                 in queue_report_t report) {
    Register<bit<32>, port_num_t>(PORT_COUNT, 0) lte_queue_delay;   // the LTE link's last reported queueing time
    Register<bit<32>, port_num_t>(PORT_COUNT, 0) wifi_queue_delay;
    Hash<bit<1>>(HashAlgorithm_t.CRC32) flow_hash;
    Random<bit<16>>() draw;

    /* What the policy's mode asks (set by its action, read by the choice below). */
    steering_mode_t mode = STEERING_FLOW_HASH;
    bit<16> lte_fraction = 0x8000;
    link_t preferred = LINK_LTE;
    bit<32> spill = 0;
    bit<32> lte_delay = 0;
    bit<32> wifi_delay = 0;
    bit<32> lte_packet_time = 1;
    bit<32> wifi_packet_time = 1;

    /* Every mode's comparison is computed on every steered packet, side by side, and one table picks the link from
     * the mode and the signs (bit 31) of the differences: Tofino's gateways compare fields with constants only, an
     * action does one operation per field, and each step that reads an earlier one's result is a stage of its own. */
    bit<1> hash_link = 0;
    bit<32> random_draw = 0;
    bit<32> lte_delay_now = 0;
    bit<32> wifi_delay_now = 0;
    bit<32> delay_difference = 0;    // LTE's queueing time less Wi-Fi's
    bit<32> draw_below_fraction = 0; // negative when the draw falls below the LTE share
    bit<32> spill_less_lte = 0;      // lowest-rtt-first: the spill bound less each link's queueing time
    bit<32> spill_less_wifi = 0;
    bit<32> wifi_terms = 0;          // earliest-arrival's terms besides the queueing times
    bit<32> lte_terms = 0;
    bit<32> terms_difference = 0;
    bit<32> arrival_margin = 0;      // negative when LTE's packet would arrive first

    /* Every difference that needs only what the tables and registers read, in one action (one operation per field). */
    @hidden
    action take_differences() {
        delay_difference = lte_delay_now - wifi_delay_now;
        draw_below_fraction = random_draw - (bit<32>)lte_fraction;
        spill_less_lte = spill - lte_delay_now;
        spill_less_wifi = spill - wifi_delay_now;
        wifi_terms = wifi_packet_time + wifi_delay;
        lte_terms = lte_packet_time + lte_delay;
    }

    @hidden
    action take_terms_difference() {
        terms_difference = wifi_terms - lte_terms;
    }

    @hidden
    action take_arrival_margin() {
        arrival_margin = delay_difference - terms_difference;
    }

    action steer_flow_hash() {
        mode = STEERING_FLOW_HASH;
    }

    action steer_weighted(bit<16> lte_fraction_of_65536) {
        mode = STEERING_WEIGHTED;
        lte_fraction = lte_fraction_of_65536;
    }

    action steer_qdepl(bit<16> lte_fraction_of_65536) {
        mode = STEERING_QDEPL;
        lte_fraction = lte_fraction_of_65536;
    }

    action steer_qdepl_measured() {
        mode = STEERING_QDEPL_MEASURED;
    }

    action steer_lowest_rtt(link_t preferred_link, bit<32> spill_backlog_us) {
        mode = STEERING_LOWEST_RTT;
        preferred = preferred_link;
        spill = spill_backlog_us;
    }

    action steer_earliest_arrival() {
        mode = STEERING_EARLIEST_ARRIVAL;
    }

    action steer_lte_only() {
        mode = STEERING_LTE_ONLY;
    }

    action steer_wifi_only() {
        mode = STEERING_WIFI_ONLY;
    }

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

    @hidden
    action to_lte() {
        tm_md.ucast_egress_port = md.lte_port;
        hdr.wire.ethernet.dst_addr = md.lte_dst_mac;
    }

    @hidden
    action to_wifi() {
        tm_md.ucast_egress_port = md.wifi_port;
        hdr.wire.ethernet.dst_addr = md.wifi_dst_mac;
    }

    /* The modes' decisions (entry order is priority):
     *   flow-hash: the hash bit; weighted: LTE when the draw is below the share;
     *   qdepl: LTE when its queueing time is shorter, or equal and the draw below the share (measured: half the
     *   draws); lowest-rtt-first: the preferred link unless its queueing time exceeds the spill bound;
     *   earliest-arrival: LTE when its arrival margin is negative (Wi-Fi on a tie). */
    @hidden
    table choices {
        key = {
            mode: ternary;
            hash_link: ternary;
            draw_below_fraction[31:31]: ternary;
            random_draw[15:15]: ternary;
            delay_difference: ternary;
            preferred: ternary;
            spill_less_lte[31:31]: ternary;
            spill_less_wifi[31:31]: ternary;
            arrival_margin[31:31]: ternary;
        }
        actions = {
            to_lte;
            to_wifi;
        }
        /* mode, hash, draw below share, draw's top bit, LTE's queueing time less Wi-Fi's (LTE_SHORTER: negative; 0: a
         * tie), preferred, LTE spills, Wi-Fi spills, LTE earlier */
        const entries = {
            (STEERING_FLOW_HASH, 0, _, _, _, _, _, _, _): to_lte();
            (STEERING_FLOW_HASH, 1, _, _, _, _, _, _, _): to_wifi();
            (STEERING_WEIGHTED, _, 1, _, _, _, _, _, _): to_lte();
            (STEERING_WEIGHTED, _, _, _, _, _, _, _, _): to_wifi();
            (STEERING_QDEPL, _, _, _, LTE_SHORTER, _, _, _, _): to_lte();
            (STEERING_QDEPL, _, 1, _, 0, _, _, _, _): to_lte();
            (STEERING_QDEPL, _, _, _, _, _, _, _, _): to_wifi();
            (STEERING_QDEPL_MEASURED, _, _, _, LTE_SHORTER, _, _, _, _): to_lte();
            (STEERING_QDEPL_MEASURED, _, _, 0, 0, _, _, _, _): to_lte();
            (STEERING_QDEPL_MEASURED, _, _, _, _, _, _, _, _): to_wifi();
            (STEERING_LOWEST_RTT, _, _, _, _, LINK_LTE, 1, _, _): to_wifi();
            (STEERING_LOWEST_RTT, _, _, _, _, LINK_LTE, _, _, _): to_lte();
            (STEERING_LOWEST_RTT, _, _, _, _, _, _, 1, _): to_lte();
            (STEERING_LOWEST_RTT, _, _, _, _, _, _, _, _): to_wifi();
            (STEERING_EARLIEST_ARRIVAL, _, _, _, _, _, _, _, 1): to_lte();
            (STEERING_EARLIEST_ARRIVAL, _, _, _, _, _, _, _, _): to_wifi();
            (STEERING_LTE_ONLY, _, _, _, _, _, _, _, _): to_lte();
            (STEERING_WIFI_ONLY, _, _, _, _, _, _, _, _): to_wifi();
        }
        const default_action = to_lte();
        size = 18;
    }

    /* Applied to every packet, so that its lookups and arithmetic run beside the checks (a condition over them would
     * hold back whatever follows it); a report records its link's queueing time, and only an LWIP packet (not a
     * helper frame) has its link chosen. */
    apply {
        if (report.isValid()) {
            if (queue_report_links.apply().hit) {
                if (report_is_lte) {
                    record_lte_delay.execute(report_pair);
                } else {
                    record_wifi_delay.execute(report_pair);
                }
            }
        } else {
            lte_delay_now = read_lte_delay.execute(md.lte_port);
            wifi_delay_now = read_wifi_delay.execute(md.lte_port);
        }
        link_state.apply();
        modes.apply();
        random_draw = (bit<32>)draw.get();
        hash_link = flow_hash.get({hdr.wire.ipv4.src_addr, hdr.wire.ipv4.dst_addr, hdr.wire.ipv4.protocol,
                                   md.l4_src_port, md.l4_dst_port});
        take_differences();
        take_terms_difference();
        take_arrival_margin();
        if (md.lwip && !hdr.helper.isValid()) {
            choices.apply();
        }
    }
}

#endif  // TNG_TNA_STEERING_P4
