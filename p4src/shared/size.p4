/*
 * tng main pipeline: table, counter and register sizes, shared by every target.
 */
#ifndef TNG_SIZE_P4
#define TNG_SIZE_P4

/* Ports are 9 bit on BMv2 and Tofino: per-port arrays cover them all. */
#define PORT_COUNT 512

/* Weight 2^-2 of a new sample in the EWMA of a port's per-packet service time. */
#define PORT_SERVICE_EWMA_SHIFT 2

#define ROUTES_TABLE_SIZE 1024
#define FLOW_POLICY_TABLE_SIZE 1024
#define CONNECTION_POLICY_TABLE_SIZE 4096

/* policy_id_t is 8 bit. */
#define POLICY_COUNT 256

/* New-flow filter: two bit arrays indexed by independent hashes of the 5-tuple. */
#define SEEN_FLOW_CELLS 65536

/* VISIBLE per-flow state: VISIBLE_FLOW_CELLS = 2^VISIBLE_FLOW_INDEX_BITS cells, indexed by a direction-symmetric
 * hash of the 5-tuple. */
#define VISIBLE_FLOW_INDEX_BITS 12
#define VISIBLE_FLOW_CELLS 4096

#endif  // TNG_SIZE_P4
