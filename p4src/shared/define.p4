/*
 * tng pipelines: constants shared by every target (v1model now, TNA later).
 * Wire-format numbers come from docs/wire-format.md; drop reasons are the public
 * index table of the tng_wire_drops counter (p4src/README.md).
 */
#ifndef TNG_DEFINE_P4
#define TNG_DEFINE_P4

typedef bit<9>  port_num_t;
typedef bit<48> mac_addr_t;
typedef bit<32> ipv4_addr_t;
typedef bit<16> l4_port_t;

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<8>  IP_PROTO_TCP = 6;
const bit<8>  IP_PROTO_UDP = 17;
const bit<4>  IPV4_IHL_MIN = 5;

/* Header sizes in bytes. */
#define ETH_HEADER_BYTES 14
#define IPV4_HEADER_BYTES 20
#define UDP_HEADER_BYTES 8
#define TCP_HEADER_BYTES 20
#define TNG_FLOW_HEADER_BYTES 24
#define TNG_INITIAL_PREFIX_BYTES 5
#define TNG_RETRY_PREFIX_BYTES 2
#define TNG_AEAD_TAG_BYTES 16
#define TNG_SECTION_PREFIX_BYTES 19

/* tng transport (wire-format sections 1-3). */
const l4_port_t TNG_UDP_PORT = 4477;
const bit<8> TNG_VERSION = 1;
#define TNG_MAX_PACKET_BYTES 1472
#define TNG_MIN_CLIENT_INITIAL_BYTES 1200

const bit<8> TNG_TYPE_INITIAL = 0x01;
const bit<8> TNG_TYPE_RETRY = 0x02;
const bit<8> TNG_TYPE_DATA = 0x03;
const bit<8> TNG_TYPE_ACK = 0x04;
const bit<8> TNG_TYPE_PROBE = 0x05;
const bit<8> TNG_TYPE_CLOSE = 0x06;
const bit<8> TNG_TYPE_SECTION = 0x07;
const bit<8> TNG_TYPE_SECTION_ACK = 0x08;
#define TNG_PACKET_TYPE_COUNT 9

const bit<8> TNG_FLAG_ECN_CAPABLE = 0x01;
const bit<8> TNG_FLAG_FEEDBACK_ECHO = 0x02;
const bit<8> TNG_FLAG_KEY_PHASE = 0x04;
const bit<8> TNG_FLAGS_RESERVED = 0xf8;

const bit<8> TNG_STAGE_CLIENT_HELLO = 1;
const bit<8> TNG_STAGE_SERVER = 2;
const bit<8> TNG_STAGE_CLIENT_FINISH = 3;
const bit<8> TNG_SECTION_VERSION = 1;

/* Drop reasons: index of the tng_wire_drops counter. 1-10 are the receiver rules of
 * wire-format section 8, by their error names. */
typedef bit<8> drop_reason_t;
const drop_reason_t DROP_REASON_NONE = 0xff;
const drop_reason_t DROP_OTHER_PARSER_ERROR = 0;
const drop_reason_t DROP_TOO_LARGE = 1;
const drop_reason_t DROP_TRUNCATED_HEADER = 2;
const drop_reason_t DROP_BAD_VERSION = 3;
const drop_reason_t DROP_UNKNOWN_TYPE = 4;
const drop_reason_t DROP_RESERVED_FLAGS = 5;
const drop_reason_t DROP_LENGTH_MISMATCH = 6;
const drop_reason_t DROP_HANDSHAKE_LENGTH = 7;
const drop_reason_t DROP_BAD_STAGE = 8;
const drop_reason_t DROP_INITIAL_TOO_SMALL = 9;
const drop_reason_t DROP_SHORT_SEALED_PAYLOAD = 10;
const drop_reason_t DROP_PACKET_TOO_SHORT = 11;
const drop_reason_t DROP_IPV4_CHECKSUM = 12;
/* Reasons of the main pipeline (tng.p4), after the wire checks. */
const drop_reason_t DROP_TTL_EXPIRED = 13;
const drop_reason_t DROP_NO_ROUTE = 14;
const drop_reason_t DROP_BAD_LENGTH = 15;
const drop_reason_t DROP_HELPER_FRAME = 16;
/* A receiver rule added after the pipeline's own reasons (wire-format section 10). */
const drop_reason_t DROP_BAD_SECTION = 17;
#define DROP_REASON_COUNT 18

#define PORT_FORWARD_TABLE_SIZE 512

#endif  // TNG_DEFINE_P4
