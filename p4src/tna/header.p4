/*
 * TNA only: what the Tofino pipeline adds to the shared headers and metadata (shared/pipeline_header.p4). Ingress and
 * egress are separate programs on Tofino, so what egress needs of ingress travels in front of the packet: a bridged
 * header on every forwarded packet, a mirror header on every copy for the retransmission helper. Both start with a
 * kind byte, which the egress parser reads first. Steering's view of the queues travels the other way, egress to
 * ingress: a queue report, mirrored by egress to the recirculation port (tna/queue_report.p4).
 */
#ifndef TNG_TNA_HEADER_P4
#define TNG_TNA_HEADER_P4

#include "shared/pipeline_header.p4"

typedef bit<8> bridge_kind_t;
const bridge_kind_t BRIDGE_KIND_FORWARDED = 1;
const bridge_kind_t BRIDGE_KIND_HELPER_COPY = 2;
const bridge_kind_t BRIDGE_KIND_QUEUE_REPORT = 3;

/* Mirror type of the copies for the helper (eg/ig_intr_md_for_dprsr.mirror_type; 0 means "no mirror"). */
const MirrorType_t MIRROR_TYPE_HELPER = 1;
/* Mirror type of egress's queue reports (eg_intr_md_for_dprsr.mirror_type). */
const MirrorType_t MIRROR_TYPE_QUEUE_REPORT = 2;
/* The mirror session the controller points at the recirculation port, for queue reports. */
const bit<32> QUEUE_REPORT_SESSION = 2;
/* Tofino 1's recirculation port of pipe 0: queue reports come back into ingress on it. */
const port_num_t TNA_RECIRC_PORT = 68;
/* Digest type of new_flow_digest_t (ig_intr_md_for_dprsr.digest_type; 0 means "no digest"). */
const DigestType_t DIGEST_TYPE_NEW_FLOW = 1;

/* Ingress -> egress on forwarded packets (and on the helper's confirmations, which VISIBLE takes in egress): what
 * egress needs of ingress's lookups. */
header bridged_t {
    bridge_kind_t kind;
    policy_id_t   policy;
    port_role_t   role;
    bit<5>        _pad0;
    bool          lwip;
    bool          injected;
    bool          bypass;
    bit<7>        _pad1;
    port_num_t    ingress_port;
    bit<16>       tcp_payload_bytes;
    bit<16>       tcp_residual;  // the TCP checksum without what VISIBLE may rewrite (the ingress parser's residual)
    bit<32>       ingress_time;  // when ingress saw the packet (256 ns units): egress takes the queueing time from it
}

/* Egress -> egress on copies for the helper (VISIBLE's Mirror.emit). The frame as sent follows, unparsed. */
header helper_mirror_t {
    bridge_kind_t   kind;
    helper_reason_t reason;
    bit<7>          _pad;
    port_num_t      ingress_port;
}

/* Egress -> ingress (mirrored to the recirculation port): how long the last packet sent on a port waited there, in
 * 256 ns units from ingress to egress. The sent packet follows, truncated by the mirror session. */
header queue_report_t {
    bridge_kind_t kind;
    bit<7>        _pad;
    port_num_t    port;
    bit<32>       queue_delay;
}

struct tna_headers_t {
    queue_report_t queue_report;
    bridged_t      bridged;
    tng_headers_t  tng;
}

/* Per-packet state only the Tofino program needs. */
struct tna_ingress_metadata_t {
    tng_metadata_t tng;
    bool           ipv4_checksum_error;
    /* The TCP checksum without the fields VISIBLE may rewrite (the parser's Checksum residual), bridged to egress,
     * whose deparser adds them back as they leave. */
    bit<16>        tcp_residual;
    new_flow_digest_t new_flow;
}

struct tna_egress_metadata_t {
    tng_metadata_t  tng;
    helper_mirror_t helper_mirror;
    /* The mirror session of a copy for the helper: Tofino's deparser reads it from a field, not a constant. */
    MirrorId_t      helper_session;
    queue_report_t  queue_report;
    MirrorId_t      report_session;
    /* The packet's queueing time, from ingress to egress (256 ns units). */
    bit<32>         waited;
    bit<16>         tcp_residual;
    bool            tcp_rewritten;
    /* The UDP checksum without the tng feedback fields (residual), and whether the sender used one at all. */
    bit<16>         udp_residual;
    bool            udp_rewritten;
}

#endif  // TNG_TNA_HEADER_P4
