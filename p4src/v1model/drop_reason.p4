/*
 * v1model: classify a packet's parser and checksum outcome into a drop reason (define.p4).
 * DROP_REASON_NONE means the packet passed every wire check.
 */
#ifndef TNG_V1MODEL_DROP_REASON_P4
#define TNG_V1MODEL_DROP_REASON_P4

#include <core.p4>
#include <v1model.p4>

#include "shared/define.p4"
#include "v1model/parser.p4"

control WireDropReason(in standard_metadata_t std_md, out drop_reason_t reason) {
    apply {
        if (std_md.parser_error == error.NoError) {
            reason = std_md.checksum_error == 1 ? DROP_IPV4_CHECKSUM : DROP_REASON_NONE;
        } else if (std_md.parser_error == error.TngTooLarge) {
            reason = DROP_TOO_LARGE;
        } else if (std_md.parser_error == error.TngTruncatedHeader) {
            reason = DROP_TRUNCATED_HEADER;
        } else if (std_md.parser_error == error.TngBadVersion) {
            reason = DROP_BAD_VERSION;
        } else if (std_md.parser_error == error.TngUnknownType) {
            reason = DROP_UNKNOWN_TYPE;
        } else if (std_md.parser_error == error.TngReservedFlags) {
            reason = DROP_RESERVED_FLAGS;
        } else if (std_md.parser_error == error.TngLengthMismatch) {
            reason = DROP_LENGTH_MISMATCH;
        } else if (std_md.parser_error == error.TngHandshakeLength) {
            reason = DROP_HANDSHAKE_LENGTH;
        } else if (std_md.parser_error == error.TngBadStage) {
            reason = DROP_BAD_STAGE;
        } else if (std_md.parser_error == error.TngInitialTooSmall) {
            reason = DROP_INITIAL_TOO_SMALL;
        } else if (std_md.parser_error == error.TngShortSealedPayload) {
            reason = DROP_SHORT_SEALED_PAYLOAD;
        } else if (std_md.parser_error == error.TngBadSection) {
            reason = DROP_BAD_SECTION;
        } else if (std_md.parser_error == error.PacketTooShort) {
            reason = DROP_PACKET_TOO_SHORT;
        } else {
            reason = DROP_OTHER_PARSER_ERROR;
        }
    }
}

#endif  // TNG_V1MODEL_DROP_REASON_P4
