/* v1model deparser: emits the headers the parser extracted; the unparsed payload follows. */
#ifndef TNG_V1MODEL_DEPARSER_P4
#define TNG_V1MODEL_DEPARSER_P4

#include <core.p4>
#include <v1model.p4>

#include "shared/header.p4"

control TngDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.tcp);
        packet.emit(hdr.udp);
        packet.emit(hdr.tng_flow);
        packet.emit(hdr.tng_initial);
        packet.emit(hdr.tng_retry);
        packet.emit(hdr.tng_section);
    }
}

#endif  // TNG_V1MODEL_DEPARSER_P4
