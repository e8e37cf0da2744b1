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

/* Ingress -> egress on forwarded packets. */
header bridged_t {
    bridge_kind_t kind;
    policy_id_t   policy;
    bit<7>        _pad0;
    port_num_t    ingress_port;
    bit<32>       ingress_ns;  // when ingress saw the packet (ns, low 32 bits): egress takes the queueing time from it
    bit<7>        _pad1;
    bool          bypass;
}

/* Ingress -> egress on copies for the helper (Mirror.emit). The frame as received follows, unparsed. */
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
    /* The TCP checksum without the fields VISIBLE may rewrite (the parser's Checksum residual): the deparser adds
     * them back as they leave. */
    bit<16>        tcp_residual;
    bool           tcp_rewritten;
    helper_mirror_t helper_mirror;
    /* The mirror session of a copy for the helper: Tofino's deparser reads it from a field, not a constant. */
    MirrorId_t     helper_session;
    new_flow_digest_t new_flow;
}

struct tna_egress_metadata_t {
    tng_metadata_t  tng;
    helper_mirror_t helper_mirror;
    queue_report_t  queue_report;
    MirrorId_t      report_session;
    /* The packet's time from ingress to egress, its queueing time: in ns, then in 256 ns units. */
    bit<32>         ingress_ns;
    bit<32>         waited_ns;
    bit<32>         waited;
    /* The UDP checksum without the tng feedback fields (residual), and whether the sender used one at all. */
    bit<16>         udp_residual;
    bool            udp_rewritten;
}

#endif  // TNG_TNA_HEADER_P4
