/*
 * P4Info ids of the tables and counters both targets declare, so that one P4Info contract, names and ids, holds on
 * BMv2 and Tofino (p4src/tests/test_tna.py compares the two P4Infos). These are the ids p4c's Tofino backend derives:
 * a hash of the name with its pipe prefix ("pipe.ingress.drops"; the TNA program's Pipeline is named pipe), and it
 * ignores @id on externs such as counters. p4c's v1model backend hashes the bare name, so the v1model program pins
 * these ids with @id. A new table or counter of both targets: compile the TNA program (make p4) and copy its id from
 * p4src/build/tng_tna/p4info.txtpb. The digest cannot be pinned (v1model names it by its struct, which takes no @id):
 * its id differs per target (docs/tofino.md).
 */
#ifndef TNG_SHARED_P4INFO_ID_P4
#define TNG_SHARED_P4INFO_ID_P4

#define P4INFO_ID_PORT_ROLE                 0x02f348b2
#define P4INFO_ID_PORT_MAC                  0x02a490e8
#define P4INFO_ID_FORWARDING_ROUTES         0x0212323a
#define P4INFO_ID_CLASSIFY_CONNECTION       0x02a79bb1
#define P4INFO_ID_CLASSIFY_FLOW             0x02e92441
#define P4INFO_ID_STEERING_MODES            0x0244b8f0
#define P4INFO_ID_STEERING_LINK_STATE       0x022c558c
#define P4INFO_ID_VISIBLE_PARAMS            0x0215d66f
#define P4INFO_ID_VISIBLE_HELPER            0x029b03f3
#define P4INFO_ID_BACKPRESSURE_THRESHOLDS   0x028a08ad
#define P4INFO_ID_BACKPRESSURE_PORT_CAPACITY 0x025c3958

#define P4INFO_ID_DROPS                     0x12e06110
#define P4INFO_ID_FORWARDED                 0x123697eb
#define P4INFO_ID_PORT_TX                   0x12d8cb28
#define P4INFO_ID_POLICY_PACKETS            0x12aa2731
#define P4INFO_ID_STEERED                   0x12ec2458
#define P4INFO_ID_VISIBLE_DECISIONS         0x127c8de1
#define P4INFO_ID_FEEDBACK_WRITTEN          0x1273b4b4
#define P4INFO_ID_ECN_MARKED                0x1265e7ab

#endif  // TNG_SHARED_P4INFO_ID_P4
