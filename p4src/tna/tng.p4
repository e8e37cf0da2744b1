/*
 * tng for Tofino (TNA): the main pipeline of v1model/tng.p4, with the same controls, tables, actions, counters and
 * digest names (the P4Info contract, p4src/README.md), so that one controller drives either target. What differs per
 * target, and why, is in docs/tofino.md. Compile with p4c's Tofino backend:
 *   p4c --target tofino --arch tna -I p4src -o <out> p4src/tna/tng.p4
 *   ingress  wire checks (drop_reason.p4), forwarding, classification and LTE/Wi-Fi steering side by side, then the
 *            other drop rules (local_drop_reason.p4), the new-flow digest and the counts; queue reports update
 *            steering; the bridged header carries what egress needs
 *   egress   helper encapsulation of mirrored copies, packet-in header for the CPU port; VISIBLE on TCP, backpressure
 *            on tng; per-port queue state, queue reports, source MAC
 */
#include <core.p4>
#include <tna.p4>

#include "shared/define.p4"
#include "shared/pipeline_header.p4"
#include "shared/size.p4"
#include "tna/backpressure.p4"
#include "tna/classify.p4"
#include "tna/drop_reason.p4"
#include "tna/forwarding.p4"
#include "tna/header.p4"
#include "tna/local_drop_reason.p4"
#include "tna/pipeline_io.p4"
#include "tna/port_state.p4"
#include "tna/queue_report.p4"
#include "tna/steering.p4"
#include "tna/visible.p4"

control ingress(inout tna_headers_t hdr,
                inout tna_ingress_metadata_t md,
                in ingress_intrinsic_metadata_t ig_intr_md,
                in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {

    Counter<bit<64>, bit<8>>(DROP_REASON_COUNT, CounterType_t.PACKETS_AND_BYTES) drops;
    Counter<bit<64>, port_num_t>(PORT_COUNT, CounterType_t.PACKETS_AND_BYTES) forwarded;
    /* Steering's count of accepted packets per chosen port, kept here with the other counts of accepted packets
     * (Steering runs before the verdict). */
    @name(".ingress.steering.steered")
    Counter<bit<64>, port_num_t>(PORT_COUNT, CounterType_t.PACKETS_AND_BYTES) steered;
    WireDropReason() wire_drop_reason;
    LocalDropReason() local_drop_reason;
    Forwarding() forwarding;
    Classify() classify;
    NewFlows() new_flows;
    Steering() steering;

    action set_port_role(port_role_t role) {
        md.tng.role = role;
    }

    table port_role {
        key = {
            ig_intr_md.ingress_port: exact @name("ingress_port");
        }
        actions = {
            set_port_role;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = PORT_COUNT;
    }

    apply {
        /* Times of the TNA program, in both gresses: units of 256 ns, 32 bits (they wrap after 18 minutes). Bits 39:8
         * rather than a 1024 ns unit (41:10): a byte-aligned slice is one 32-bit input of a stateful ALU, which takes
         * two; and one gress reads one 32-bit window of global_tstamp. */
        bit<32> now = ig_prsr_md.global_tstamp[39:8];
        /* A queue report from egress only updates steering (its one call site: Tofino applies a table once). */
        bool report = hdr.queue_report.isValid();
        bool helper_frame = hdr.tng.helper.isValid();
        bool sent_out = false;
        drop_reason_t reason = DROP_REASON_NONE;
        /* Tofino spends a stage on every step that reads an earlier step's result and places a block no earlier than
         * what its statements wait for, so the checks and the lookups (packet-out, forwarding, classification,
         * steering) run on every packet side by side; only what keeps state or counts (the seen-flow bits,
         * counters) waits for the verdict. VISIBLE runs in egress (docs/tofino.md). A packet-out to a port leaves
         * by it unchanged; one to the CPU port is routed as injected. */
        drop_reason_t wire_reason;
        wire_drop_reason.apply(hdr.tng.wire, ig_prsr_md.parser_err, md.ipv4_checksum_error, wire_reason);
        if (report) {
            ig_dprsr_md.drop_ctl = 1;
        } else if (hdr.tng.packet_out.isValid() && hdr.tng.packet_out.egress_port != TNA_CPU_PORT) {
            ig_tm_md.ucast_egress_port = hdr.tng.packet_out.egress_port;
            md.tng.bypass = true;
            ig_tm_md.bypass_egress = 1;
            sent_out = true;
        } else if (helper_frame) {
            /* The helper's confirmations of copies go to egress, where VISIBLE takes (and drops) them: back out of
             * the port they came in on, in the pipe of the helper's registers. */
            ig_tm_md.ucast_egress_port = ig_intr_md.ingress_port;
        }
        drop_reason_t forwarding_reason = DROP_REASON_NONE;
        if (!report && !helper_frame && !sent_out) {
            forwarding.apply(hdr.tng, md.tng, ig_tm_md, forwarding_reason);
            classify.apply(hdr.tng, md.tng, ig_intr_md, md.new_flow);
        }
        port_role.apply();
        if (md.tng.role == ROLE_HELPER || hdr.tng.packet_out.isValid()) {
            md.tng.injected = true;
        }
        local_drop_reason.apply(hdr.tng, wire_reason, sent_out, md.tng.injected, forwarding_reason, reason,
                                md.tng.tcp_payload_bytes);
        hdr.tng.packet_out.setInvalid();
        steering.apply(hdr.tng, md.tng, ig_tm_md, hdr.queue_report);
        /* Each late step has a condition of its own: a condition over a block is placed no earlier than what any of
         * the block's statements waits for. */
        bool accepted = !report && reason == DROP_REASON_NONE;
        if (!report && reason != DROP_REASON_NONE) {
            drops.count(reason);
            ig_dprsr_md.drop_ctl = 1;
        }
        if (accepted && !helper_frame && !sent_out) {
            new_flows.apply(hdr.tng, md.tng, ig_dprsr_md);
        }
        if (accepted && !helper_frame && !sent_out && md.tng.lwip) {
            steered.count(ig_tm_md.ucast_egress_port);
        }
        if (accepted && !helper_frame) {
            forwarded.count(ig_tm_md.ucast_egress_port);
        }
        if (accepted && !sent_out) {
            hdr.bridged.setValid();
            hdr.bridged.kind = BRIDGE_KIND_FORWARDED;
            hdr.bridged.policy = md.tng.policy;
            hdr.bridged.role = md.tng.role;
            hdr.bridged._pad0 = 0;
            hdr.bridged.lwip = md.tng.lwip;
            hdr.bridged.injected = md.tng.injected;
            hdr.bridged.bypass = false;
            hdr.bridged._pad1 = 0;
            hdr.bridged.ingress_port = ig_intr_md.ingress_port;
            hdr.bridged.tcp_payload_bytes = md.tng.tcp_payload_bytes;
            hdr.bridged.tcp_residual = md.tcp_residual;
            hdr.bridged.ingress_time = now;
        }
    }
}

control egress(inout tna_headers_t hdr,
               inout tna_egress_metadata_t md,
               in egress_intrinsic_metadata_t eg_intr_md,
               in egress_intrinsic_metadata_from_parser_t eg_prsr_md,
               inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md,
               inout egress_intrinsic_metadata_for_output_port_t eg_oport_md) {

    Counter<bit<64>, port_num_t>(PORT_COUNT, CounterType_t.PACKETS_AND_BYTES) port_tx;
    Backpressure() backpressure;
    RecordPortState() record_port_state;
    ReportQueueDelay() report_queue_delay;
    /* VISIBLE runs here, where a packet's ingress verdict is known and twelve stages are free for its registers'
     * chain; its tables, actions and counter keep v1model's names (ingress.visible.*). */
    @name(".ingress.visible")
    Visible() visible;

    action set_source_mac(mac_addr_t mac) {
        hdr.tng.wire.ethernet.src_addr = mac;
    }

    /* The queueing time, from the bridged ingress time (waits are below 2^32 x 256 ns, 18 minutes). */
    @hidden
    action take_waited(bit<32> now) {
        md.waited = now - hdr.bridged.ingress_time;
    }

    /* Apart from the port: a Tofino action cannot write a constant and a rotated field into one container. */
    @hidden
    action clear_packet_in_pad() {
        hdr.tng.packet_in._pad = 0;
    }

    table port_mac {
        key = {
            eg_intr_md.egress_port: exact @name("egress_port");
        }
        actions = {
            set_source_mac;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = PORT_COUNT;
    }

    apply {
        /* Times in 256 ns units, as ingress's (bits 39:8 of global_tstamp). */
        bit<32> now = eg_prsr_md.global_tstamp[39:8];
        if (hdr.queue_report.isValid()) {
            return;  // a queue report on its way to the recirculation port
        }
        if (md.helper_mirror.isValid()) {
            /* A copy for the retransmission helper: the frame as sent, behind a helper header. */
            hdr.tng.helper_ethernet.setValid();
            hdr.tng.helper_ethernet.dst_addr = 0;
            hdr.tng.helper_ethernet.src_addr = 0;
            hdr.tng.helper_ethernet.ether_type = ETHERTYPE_TNG_HELPER;
            hdr.tng.helper.setValid();
            hdr.tng.helper.reason = md.helper_mirror.reason;
            hdr.tng.helper._reserved = 0;
            if (eg_intr_md.egress_port == TNA_CPU_PORT) {
                hdr.tng.packet_in.setValid();
                hdr.tng.packet_in.ingress_port = md.helper_mirror.ingress_port;
                clear_packet_in_pad();
            }
            return;
        }
        /* The bridged header is read where needed and not deparsed (pipeline_io.p4): copying its fields out first
         * would be a step that VISIBLE waits for. */
        if (eg_intr_md.egress_port == TNA_CPU_PORT) {
            hdr.tng.packet_in.setValid();
            hdr.tng.packet_in.ingress_port = hdr.bridged.ingress_port;
            clear_packet_in_pad();
            return;
        }
        /* TCP for VISIBLE, tng (UDP) for backpressure: exclusive branches share stages. */
        if (hdr.tng.wire.tcp.isValid()) {
            visible.apply(hdr.tng, md.tng, hdr.bridged.ingress_port, eg_dprsr_md, now, md.tcp_rewritten,
                          md.helper_mirror, md.helper_session);
        } else if (!md.tng.bypass) {
            take_waited(now);
            backpressure.apply(hdr.tng, md.tng, eg_intr_md, md.waited, md.udp_rewritten);
        }
        record_port_state.apply(eg_intr_md, now);
        bit<1> report_due;
        report_queue_delay.apply(eg_intr_md, now, hdr.bridged.ingress_time, md.queue_report, report_due);
        if (!hdr.tng.helper.isValid()) {
            port_tx.count(eg_intr_md.egress_port);
        }
        if (!md.tng.bypass) {
            port_mac.apply();
        }
        /* One mirror per packet: a copy for the helper goes before a queue report. */
        if (report_due == 1 && eg_dprsr_md.mirror_type == 0) {
            eg_dprsr_md.mirror_type = MIRROR_TYPE_QUEUE_REPORT;
            md.report_session = (MirrorId_t)QUEUE_REPORT_SESSION;
        }
    }
}

Pipeline(TngIngressParser(),
         ingress(),
         TngIngressDeparser(),
         TngEgressParser(),
         egress(),
         TngEgressDeparser()) pipe;

Switch(pipe) main;
