/*
 * tng: the main pipeline. One program for every in-path role; tables decide the role of each port and the policy of
 * each flow:
 *   ingress  wire checks (parser.p4) -> port role -> IPv4 forwarding (forwarding.p4) -> flow policy and new-flow
 *            digest (classify.p4) -> LTE/Wi-Fi steering for LWIP next hops (steering.p4) -> VISIBLE on TCP
 *            (visible.p4); malformed, unroutable and TTL-expired packets are dropped and counted by reason; frames
 *            from the retransmission helper (confirmations of its copies) go to VISIBLE only, which drops them
 *   egress   helper encapsulation of clones, packet-in header for the CPU port, source MAC, per-port queue state,
 *            queue-sharing backpressure (backpressure.p4)
 * P4Info names, parameters and units: p4src/README.md, section "tng: the main pipeline".
 */
#include <core.p4>
#include <v1model.p4>

#include "shared/define.p4"
#include "shared/p4info_id.p4"
#include "shared/pipeline_header.p4"
#include "shared/size.p4"
#include "v1model/backpressure.p4"
#include "v1model/classify.p4"
#include "v1model/drop_reason.p4"
#include "v1model/forwarding.p4"
#include "v1model/pipeline_io.p4"
#include "v1model/port_state.p4"
#include "v1model/steering.p4"
#include "v1model/visible.p4"

/* The egress_spec mark_to_drop() sets (v1model.p4: BMv2's drop port). */
const bit<9> V1MODEL_DROP_PORT = 511;

control ingress(inout tng_headers_t hdr,
                inout tng_metadata_t md,
                inout standard_metadata_t std_md) {

    @id(P4INFO_ID_DROPS)
    counter(DROP_REASON_COUNT, CounterType.packets_and_bytes) drops;
    /* Packets ingress handed to the traffic manager, by egress port (clones not included): against egress.port_tx,
     * what the port's egress queue dropped, which the pipeline never sees. */
    @id(P4INFO_ID_FORWARDED)
    counter(PORT_COUNT, CounterType.packets_and_bytes) forwarded;
    WireDropReason() wire_drop_reason;
    Forwarding() forwarding;
    Classify() classify;
    Steering() steering;
    Visible() visible;

    action set_port_role(port_role_t role) {
        md.role = role;
    }

    @id(P4INFO_ID_PORT_ROLE)
    table port_role {
        key = {
            std_md.ingress_port: exact @name("ingress_port");
        }
        actions = {
            set_port_role;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = PORT_COUNT;
    }

    /* IPv4 total length within the frame and covering its header; TCP data offset and UDP length within it. */
    @hidden
    action check_lengths(out bool bad) {
        bit<32> frame_bytes = std_md.packet_length - (hdr.packet_out.isValid() ? 32w2 : 32w0);
        bit<16> ip_header_bytes = (bit<16>)hdr.wire.ipv4.ihl << 2;
        bit<16> l4_bytes = hdr.wire.ipv4.total_len - ip_header_bytes;
        bit<16> tcp_header_bytes = (bit<16>)hdr.wire.tcp.data_offset << 2;
        bad = hdr.wire.ipv4.total_len < ip_header_bytes
              || (bit<32>)hdr.wire.ipv4.total_len + ETH_HEADER_BYTES > frame_bytes
              || (hdr.wire.tcp.isValid()
                  && (hdr.wire.tcp.data_offset < TCP_DATA_OFFSET_MIN || l4_bytes < tcp_header_bytes))
              || (hdr.wire.udp.isValid() && (hdr.wire.udp.length < UDP_HEADER_BYTES || hdr.wire.udp.length > l4_bytes));
        md.tcp_payload_bytes = l4_bytes - tcp_header_bytes;
    }

    apply {
        drop_reason_t reason;
        wire_drop_reason.apply(std_md, reason);
        /* A helper frame (a confirmation of copies) is for VISIBLE alone, which drops it: never routed or classified. */
        bool helper_frame = hdr.helper.isValid();

        if (reason == DROP_REASON_NONE && hdr.packet_out.isValid()) {
            if (hdr.packet_out.egress_port != CPU_PORT) {
                std_md.egress_spec = hdr.packet_out.egress_port;
                md.bypass = true;
                forwarded.count((bit<32>)std_md.egress_spec);
                return;
            }
            md.injected = true;
        }
        port_role.apply();
        if (md.role == ROLE_HELPER) {
            md.injected = true;
        }

        if (reason == DROP_REASON_NONE) {
            if (!hdr.wire.ipv4.isValid()) {
                reason = DROP_NO_ROUTE;
            } else {
                bool bad_length;
                check_lengths(bad_length);
                if (bad_length) {
                    reason = DROP_BAD_LENGTH;
                }
            }
        }
        /* Only the helper's confirmations of copies are taken (by VISIBLE); any other helper frame, and every one
         * that did not come from the helper, is dropped here, where it is counted. */
        if (reason == DROP_REASON_NONE && helper_frame
            && !(md.injected && hdr.helper.reason == HELPER_COPIES_HELD && hdr.wire.tcp.isValid())) {
            reason = DROP_HELPER_FRAME;
        }
        if (reason == DROP_REASON_NONE && !helper_frame) {
            if (hdr.wire.tcp.isValid()) {
                md.l4_src_port = hdr.wire.tcp.src_port;
                md.l4_dst_port = hdr.wire.tcp.dst_port;
            } else if (hdr.wire.udp.isValid()) {
                md.l4_src_port = hdr.wire.udp.src_port;
                md.l4_dst_port = hdr.wire.udp.dst_port;
            }
            forwarding.apply(hdr, md, std_md, reason);
        }
        if (reason != DROP_REASON_NONE) {
            drops.count((bit<32>)reason);
            mark_to_drop(std_md);
            return;
        }

        if (!helper_frame) {
            classify.apply(hdr, md, std_md);
            if (md.lwip) {
                steering.apply(hdr, md, std_md);
            }
        }
        visible.apply(hdr, md, std_md);
        if (std_md.egress_spec != V1MODEL_DROP_PORT) {
            forwarded.count((bit<32>)std_md.egress_spec);
        }
    }
}

control egress(inout tng_headers_t hdr,
               inout tng_metadata_t md,
               inout standard_metadata_t std_md) {

    @id(P4INFO_ID_PORT_TX)
    counter(PORT_COUNT, CounterType.packets_and_bytes) port_tx;
    Backpressure() backpressure;
    RecordPortState() record_port_state;

    action set_source_mac(mac_addr_t mac) {
        hdr.wire.ethernet.src_addr = mac;
    }

    @id(P4INFO_ID_PORT_MAC)
    table port_mac {
        key = {
            std_md.egress_port: exact @name("egress_port");
        }
        actions = {
            set_source_mac;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = PORT_COUNT;
    }

    apply {
        if (std_md.instance_type == INSTANCE_TYPE_INGRESS_CLONE) {
            /* A copy for the retransmission helper: the frame as received, behind a helper header. */
            hdr.helper_ethernet.setValid();
            hdr.helper_ethernet.dst_addr = 0;
            hdr.helper_ethernet.src_addr = 0;
            hdr.helper_ethernet.ether_type = ETHERTYPE_TNG_HELPER;
            hdr.helper.setValid();
            hdr.helper.reason = md.helper_reason;
            hdr.helper._reserved = 0;
            if (std_md.egress_port == CPU_PORT) {
                hdr.packet_in.setValid();
                hdr.packet_in.ingress_port = md.helper_ingress_port;
                hdr.packet_in._pad = 0;
            }
            return;
        }
        if (std_md.egress_port == CPU_PORT) {
            hdr.packet_in.setValid();
            hdr.packet_in.ingress_port = std_md.ingress_port;
            hdr.packet_in._pad = 0;
            return;
        }
        record_port_state.apply(std_md);
        port_tx.count((bit<32>)std_md.egress_port);
        if (!md.bypass) {
            port_mac.apply();
            backpressure.apply(hdr, md, std_md);
        }
    }
}

V1Switch(TngPipelineParser(),
         TngPipelineVerifyChecksum(),
         ingress(),
         egress(),
         TngPipelineComputeChecksum(),
         TngPipelineDeparser()) main;
