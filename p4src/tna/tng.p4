/*
 * tng for Tofino (TNA): the main pipeline of v1model/tng.p4, with the same controls, tables, actions, counters and
 * digest names (the P4Info contract, p4src/README.md), so that one controller drives either target. What differs per
 * target, and why, is in docs/tofino.md. Compile with p4c's Tofino backend:
 *   p4c --target tofino --arch tna -I p4src -o <out> p4src/tna/tng.p4
 *   ingress  queue reports to steering; wire checks (drop_reason.p4) -> packet-out handling -> port role -> IPv4
 *            forwarding -> flow policy and new-flow digest -> LTE/Wi-Fi steering -> VISIBLE; the bridged header
 *            carries what egress needs
 *   egress   helper encapsulation of mirrored copies, packet-in header for the CPU port, source MAC, per-port queue
 *            state and queue reports, backpressure
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
    Visible() visible;

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
        /* Times of the TNA program: units of 256 ns, 32 bits (they wrap after 18 minutes). Bits 39:8 rather than a
         * 1024 ns unit (41:10): a byte-aligned slice is one 32-bit input of a stateful ALU, which takes two. */
        bit<32> now = ig_prsr_md.global_tstamp[39:8];
        /* A queue report from egress only updates steering (its one call site: Tofino applies a table once). */
        bool report = hdr.queue_report.isValid();
        bool helper_frame = hdr.tng.helper.isValid();
        bool sent_out = false;
        drop_reason_t reason = DROP_REASON_NONE;
        /* Tofino spends a stage on every step that reads an earlier step's result and places a block no earlier than
         * what its statements wait for, so the checks and the lookups (packet-out, forwarding, classification,
         * steering) run on every packet side by side; only what keeps state or counts (the seen-flow bits, VISIBLE,
         * counters) waits for the verdict. A packet-out to a port leaves by it unchanged; one to the CPU port is
         * routed as injected. */
        drop_reason_t wire_reason;
        wire_drop_reason.apply(hdr.tng.wire, ig_prsr_md.parser_err, md.ipv4_checksum_error, wire_reason);
        if (report) {
            ig_dprsr_md.drop_ctl = 1;
        } else if (hdr.tng.packet_out.isValid() && hdr.tng.packet_out.egress_port != TNA_CPU_PORT) {
            ig_tm_md.ucast_egress_port = hdr.tng.packet_out.egress_port;
            md.tng.bypass = true;
            ig_tm_md.bypass_egress = 1;
            sent_out = true;
        }
        drop_reason_t forwarding_reason = DROP_REASON_NONE;
        if (!report && !helper_frame && !sent_out) {
            forwarding.apply(hdr.tng, md.tng, ig_tm_md, forwarding_reason);
            classify.apply(hdr.tng, md.tng);
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
            new_flows.apply(hdr.tng, md.tng, ig_intr_md, ig_dprsr_md, md.new_flow);
        }
        if (accepted && !helper_frame && !sent_out && md.tng.lwip) {
            steered.count(ig_tm_md.ucast_egress_port);
        }
        if (accepted && !sent_out) {
            visible.apply(hdr.tng, md.tng, ig_intr_md, ig_dprsr_md, now, md.tcp_rewritten);
            md.helper_mirror.setValid();
            md.helper_mirror.kind = BRIDGE_KIND_HELPER_COPY;
            md.helper_mirror.reason = md.tng.helper_reason;
            md.helper_mirror._pad = 0;
            md.helper_mirror.ingress_port = md.tng.helper_ingress_port;
            md.helper_session = (MirrorId_t)HELPER_CLONE_SESSION;
        }
        if (accepted && ig_dprsr_md.drop_ctl == 0) {
            forwarded.count(ig_tm_md.ucast_egress_port);
        }
        if (accepted && ig_dprsr_md.drop_ctl == 0 && !sent_out) {
            hdr.bridged.setValid();
            hdr.bridged.kind = BRIDGE_KIND_FORWARDED;
            hdr.bridged.policy = md.tng.policy;
            hdr.bridged._pad0 = 0;
            hdr.bridged.ingress_port = ig_intr_md.ingress_port;
            hdr.bridged._pad1 = 0;
            hdr.bridged.bypass = false;
            hdr.bridged.ingress_ns = ig_prsr_md.global_tstamp[31:0];
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

    action set_source_mac(mac_addr_t mac) {
        hdr.tng.wire.ethernet.src_addr = mac;
    }

    /* The queueing time in steps of their own: a Tofino action does one operation per field, on at most two
     * containers (the bridged header splits the ingress time over two). Waits are below 2^32 ns (4.3 s). */
    @hidden
    action take_ingress_ns() {
        md.ingress_ns = hdr.bridged.ingress_ns;
    }

    @hidden
    action take_waited_ns() {
        md.waited_ns = eg_prsr_md.global_tstamp[31:0] - md.ingress_ns;
    }

    @hidden
    action take_wait_units() {
        md.waited = md.waited_ns >> 8;
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
        /* Egress times are nanoseconds (the low 32 bits: they wrap after 4.3 s), not ingress's 256 ns units: one
         * gress reads one 32-bit window of global_tstamp, which the queueing time takes from the bridged ingress
         * time. */
        bit<32> now = eg_prsr_md.global_tstamp[31:0];
        if (hdr.queue_report.isValid()) {
            return;  // a queue report on its way to the recirculation port
        }
        if (md.helper_mirror.isValid()) {
            /* A copy for the retransmission helper: the frame as received, behind a helper header. */
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
        port_num_t ingress_port = hdr.bridged.ingress_port;
        take_ingress_ns();
        hdr.bridged.setInvalid();
        if (eg_intr_md.egress_port == TNA_CPU_PORT) {
            hdr.tng.packet_in.setValid();
            hdr.tng.packet_in.ingress_port = ingress_port;
            clear_packet_in_pad();
            return;
        }
        take_waited_ns();
        take_wait_units();
        record_port_state.apply(eg_intr_md, now);
        report_queue_delay.apply(eg_intr_md, now, md.waited, eg_dprsr_md, md.queue_report, md.report_session);
        port_tx.count(eg_intr_md.egress_port);
        if (!md.tng.bypass) {
            port_mac.apply();
            backpressure.apply(hdr.tng, md.tng, eg_intr_md, md.waited, md.waited_ns, md.udp_rewritten);
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
