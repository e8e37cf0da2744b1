/*
 * v1model checksum controls: verify the IPv4 header checksum on ingress (a failure sets
 * standard_metadata.checksum_error) and recompute it on egress.
 */
#ifndef TNG_V1MODEL_CHECKSUM_P4
#define TNG_V1MODEL_CHECKSUM_P4

#include <core.p4>
#include <v1model.p4>

#include "shared/header.p4"

control TngVerifyChecksum(inout headers_t hdr, inout local_metadata_t local_md) {
    apply {
        verify_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn, hdr.ipv4.total_len,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr },
            hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
    }
}

control TngComputeChecksum(inout headers_t hdr, inout local_metadata_t local_md) {
    apply {
        update_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn, hdr.ipv4.total_len,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr },
            hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
    }
}

#endif  // TNG_V1MODEL_CHECKSUM_P4
