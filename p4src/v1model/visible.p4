/*
 * v1model: VISIBLE virtual congestion control on the TCP ACKs of steered downlink flows (docs/visible.md maps every
 * step of the paper's algorithm to this control).
 *
 * Per-flow state lives in registers indexed by a direction-symmetric hash of the 5-tuple, so a downlink data segment
 * and the uplink ACKs of the same connection meet in one cell; a 32-bit key in the cell tells flows apart.
 *   downlink segment (LWIP route, policy with VISIBLE on): claims a free or idle cell, advances forwarded_end (every
 *     sequence number below it has been forwarded downlink) and forwarded_max (the highest one forwarded), and, while
 *     the helper is up and the policy boosts or retransmits, clones the segment to the retransmission helper
 *     (copy_start: from there on every forwarded byte was cloned). A clone can be lost on its way (CPU port,
 *     packet-in stream), so cloning proves nothing:
 *   confirmation (HELPER_COPIES_HELD from the helper): the helper holds a copy of every byte from the inner TCP
 *     header's sequence number to its ACK number; if that range starts at or below the receiver's ACK, confirmed_end
 *     moves up to its end. Boosts never go beyond confirmed_end. The frame is dropped.
 *   uplink ACK (from an LTE or Wi-Fi port): a pure dup-ACK (RFC 5681: same ACK number, no data, no SYN/FIN/RST, same
 *     window unless it carries SACK blocks, data outstanding) goes through the paper's phases in order:
 *       boost   both links' queues at most boost_max_depth packets, the helper up with copies of every byte from
 *               the receiver's ACK on, options the parser read in full (none, timestamps, timestamps + SACK
 *               blocks), no retransmission request in this burst, at most boost_max boosts, not while bytes are
 *               owed (below) a hold budget after the burst's last boost: ACK number := sent_ack + mss * dup_acks,
 *               but never beyond forwarded_end, confirmed_end nor the lowest left edge of the ACK's SACK blocks
 *       hold    no retransmission request in this burst, hold time below the hold budget, the burst no longer
 *               than the EWMA of past bursts + hold_slack, and no D-SACK (RFC 2883): the dup-ACK is dropped.
 *               The hold budget is hold_budget_us; with queue_aware_hold (steering that splits by rate, not by
 *               arrival time) plus the deeper of the flow's two link queues in time (depth x measured time per
 *               packet), and the burst may be longer by the packets queued on both links
 *       retransmit  fewer than retransmit_max requests in this burst and the helper holds copies: the dup-ACK is
 *               cloned to the helper, which re-injects the segment holding its ACK number; the dup-ACK goes on.
 *               While the switch owes the sender bytes (sent_ack past the receiver's ACK; the sender will never
 *               resend them) and the helper is up, a request goes whatever retransmit_max says, before holding,
 *               again after every hold budget (re-injected copies can be lost too): only the helper can fill
 *               that hole. With queue_aware_hold a request for owed bytes waits a hold budget after the debt last
 *               moved (a boost, a receiver's ACK short of it, a request: the hole may be on its way behind a
 *               queue), its dup-ACKs held, and a new ACK short of the debt goes on as a report, its blocks hidden
 *       otherwise   the dup-ACK goes on unchanged
 *     A new ACK ends the burst: if the burst stayed within the hold budget and nothing is owed, its SACK blocks
 *     (above its ACK number: not a D-SACK) become NOPs, so that the sender does not learn of the next hole's
 *     reordering from them, and the next hole's hold clock starts; the EWMA of burst lengths moves up by
 *     2^-alpha_shift or down by 2^-beta_shift,
 *     hold time and request count reset, and the helper gets the receiver's ACK every report_bytes of progress so
 *     it can free its copies; if bytes are still owed, the ACK goes to the helper as a request for the next ones
 *     instead, which also keeps the new burst from boosting (so a flow owes at most one burst's boosts). What the
 *     receiver acknowledged has been forwarded: forwarded_end catches up with it.
 */
#ifndef TNG_V1MODEL_VISIBLE_P4
#define TNG_V1MODEL_VISIBLE_P4

#include <core.p4>
#include <v1model.p4>

#include "shared/arith.p4"
#include "shared/p4info_id.p4"
#include "shared/pipeline_header.p4"
#include "shared/size.p4"
#include "v1model/port_state.p4"

/* Turns the SACK option (kind, length and every block) into NOPs, the TCP checksum updated word by word; the option
 * area keeps its length, so nothing else changes. */
void sack_to_nops(inout tng_headers_t hdr) {
    bit<16> checksum = checksum_update(hdr.wire.tcp.checksum, 32w0 ++ hdr.tcp_sack.kind ++ hdr.tcp_sack.length,
                                       32w0 ++ TCP_OPTION_NOP ++ TCP_OPTION_NOP);
    hdr.tcp_sack.kind = TCP_OPTION_NOP;
    hdr.tcp_sack.length = TCP_OPTION_NOP;
    if (hdr.sack_blocks[0].isValid()) {
        checksum = checksum_update(checksum, 16w0 ++ hdr.sack_blocks[0].left_edge, 16w0 ++ TCP_OPTION_NOP_X4);
        checksum = checksum_update(checksum, 16w0 ++ hdr.sack_blocks[0].right_edge, 16w0 ++ TCP_OPTION_NOP_X4);
        hdr.sack_blocks[0].left_edge = TCP_OPTION_NOP_X4;
        hdr.sack_blocks[0].right_edge = TCP_OPTION_NOP_X4;
    }
    if (hdr.sack_blocks[1].isValid()) {
        checksum = checksum_update(checksum, 16w0 ++ hdr.sack_blocks[1].left_edge, 16w0 ++ TCP_OPTION_NOP_X4);
        checksum = checksum_update(checksum, 16w0 ++ hdr.sack_blocks[1].right_edge, 16w0 ++ TCP_OPTION_NOP_X4);
        hdr.sack_blocks[1].left_edge = TCP_OPTION_NOP_X4;
        hdr.sack_blocks[1].right_edge = TCP_OPTION_NOP_X4;
    }
    if (hdr.sack_blocks[2].isValid()) {
        checksum = checksum_update(checksum, 16w0 ++ hdr.sack_blocks[2].left_edge, 16w0 ++ TCP_OPTION_NOP_X4);
        checksum = checksum_update(checksum, 16w0 ++ hdr.sack_blocks[2].right_edge, 16w0 ++ TCP_OPTION_NOP_X4);
        hdr.sack_blocks[2].left_edge = TCP_OPTION_NOP_X4;
        hdr.sack_blocks[2].right_edge = TCP_OPTION_NOP_X4;
    }
    hdr.wire.tcp.checksum = checksum;
}

control Visible(inout tng_headers_t hdr, inout tng_metadata_t md, inout standard_metadata_t std_md) {
    @id(P4INFO_ID_VISIBLE_DECISIONS)
    counter(VISIBLE_DECISION_COUNT, CounterType.packets) decisions;

    register<bit<32>>(VISIBLE_FLOW_CELLS) flow_key;
    register<bit<8>>(VISIBLE_FLOW_CELLS) flow_policy;
    register<bit<32>>(VISIBLE_FLOW_CELLS) flow_links;       // lte_port << 16 | wifi_port
    register<bit<48>>(VISIBLE_FLOW_CELLS) last_seen;        // us
    register<bit<32>>(VISIBLE_FLOW_CELLS) forwarded_end;    // every sequence number below was forwarded downlink
    register<bit<32>>(VISIBLE_FLOW_CELLS) forwarded_max;    // highest seq + length forwarded downlink
    register<bit<1>>(VISIBLE_FLOW_CELLS) ack_seen;          // receiver_ack, sent_ack and window are set
    register<bit<32>>(VISIBLE_FLOW_CELLS) receiver_ack;     // A^r: the receiver's highest ACK number
    register<bit<32>>(VISIBLE_FLOW_CELLS) sent_ack;         // A^s: the highest ACK number sent to the sender
    register<bit<16>>(VISIBLE_FLOW_CELLS) receiver_window;
    register<bit<16>>(VISIBLE_FLOW_CELLS) dup_acks;         // P: dup-ACKs in the current burst
    register<bit<32>>(VISIBLE_FLOW_CELLS) hold_time;        // H: us spent holding in this burst
    register<bit<48>>(VISIBLE_FLOW_CELLS) hold_since;       // TH: us, 0 = not holding
    register<bit<8>>(VISIBLE_FLOW_CELLS) retransmits;       // RT: requests in this burst
    register<bit<16>>(VISIBLE_FLOW_CELLS) burst_ewma;       // PH^a, VISIBLE_EWMA_FRACTION_BITS fractional bits
    register<bit<16>>(VISIBLE_FLOW_CELLS) copy_epoch;       // helper epoch the copies belong to, 0 = none
    register<bit<32>>(VISIBLE_FLOW_CELLS) copy_start;       // every forwarded byte from here on was copied
    register<bit<32>>(VISIBLE_FLOW_CELLS) reported_ack;     // last ACK number reported to the helper
    register<bit<32>>(VISIBLE_FLOW_CELLS) confirmed_end;    // the helper confirmed copies from the receiver's ACK to here
    register<bit<48>>(VISIBLE_FLOW_CELLS) requested_at;     // us, the last retransmission request

    policy_id_t policy = DEFAULT_POLICY;
    bit<16> mss = 0;
    bit<32> hold_budget = 0;
    bit<16> slack = 0;
    bit<32> boost_depth = 0;
    bit<16> boosts_max = 0;
    bit<8> requests_max = 0;
    bit<8> alpha = 0;
    bit<8> beta = 0;
    bit<32> idle_timeout = 0;
    bit<32> report_every = 0;
    bit<1> queue_aware = 0;
    bool helper_ok = false;
    bit<16> helper_epoch = 0;

    action visible_on(bit<16> segment_size, bit<32> hold_budget_us, bit<16> hold_slack, bit<32> boost_max_depth,
                      bit<16> boost_max, bit<8> retransmit_max, bit<8> alpha_shift, bit<8> beta_shift,
                      bit<32> idle_timeout_us, bit<32> report_bytes, bit<1> queue_aware_hold) {
        mss = segment_size;
        hold_budget = hold_budget_us;
        slack = hold_slack;
        boost_depth = boost_max_depth;
        boosts_max = boost_max;
        requests_max = retransmit_max;
        alpha = alpha_shift;
        beta = beta_shift;
        idle_timeout = idle_timeout_us;
        report_every = report_bytes;
        queue_aware = queue_aware_hold;
    }

    @id(P4INFO_ID_VISIBLE_PARAMS)
    table params {
        key = {
            policy: exact @name("policy");
        }
        actions = {
            visible_on;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = POLICY_COUNT;
    }

    action helper_up(bit<16> epoch) {
        helper_ok = true;
        helper_epoch = epoch;
    }

    action helper_down() {
        helper_ok = false;
    }

    /* Keyless: the controller sets the default action (helper_up with a new epoch each time the helper starts). */
    @id(P4INFO_ID_VISIBLE_HELPER)
    table helper {
        actions = {
            helper_up;
            helper_down;
        }
        default_action = helper_down();
    }

    @hidden
    action to_helper(helper_reason_t reason) {
        md.helper_reason = reason;
        md.helper_ingress_port = std_md.ingress_port;
        clone_preserving_field_list(CloneType.I2E, HELPER_CLONE_SESSION, 8w1);
    }

    apply {
        bool downlink = md.lwip && !md.injected && hdr.wire.tcp.isValid();
        bool uplink = (md.role == ROLE_LTE || md.role == ROLE_WIFI) && !md.injected && hdr.wire.tcp.isValid()
                      && (hdr.wire.tcp.flags & TCP_FLAG_ACK) != 0;
        /* Ingress lets through only the helper's confirmations of copies (tng.p4); one is consumed here. */
        bool confirmation = hdr.helper.isValid();
        if (confirmation) {
            mark_to_drop(std_md);
        }
        bit<48> now = std_md.ingress_global_timestamp;
        bit<32> key = 0;
        bit<32> cell = 0;
        bit<32> owner = 0;
        bool tracked = false;
        if (downlink || uplink || confirmation) {
            /* The same key for both directions: lower address (then port) first. */
            ipv4_addr_t addr_a = hdr.wire.ipv4.src_addr;
            ipv4_addr_t addr_b = hdr.wire.ipv4.dst_addr;
            l4_port_t port_a = hdr.wire.tcp.src_port;
            l4_port_t port_b = hdr.wire.tcp.dst_port;
            if (addr_b < addr_a || (addr_b == addr_a && port_b < port_a)) {
                addr_a = hdr.wire.ipv4.dst_addr;
                addr_b = hdr.wire.ipv4.src_addr;
                port_a = hdr.wire.tcp.dst_port;
                port_b = hdr.wire.tcp.src_port;
            }
            hash(key, HashAlgorithm.crc32, 32w0, { addr_a, addr_b, port_a, port_b }, 64w0x100000000);
            if (key == 0) {
                key = 1;  // 0 marks a free cell
            }
            cell = (bit<32>)key[VISIBLE_FLOW_INDEX_BITS - 1:0];
            flow_key.read(owner, cell);
            if (downlink) {
                policy = md.policy;
                tracked = true;
            } else if (owner == key) {
                flow_policy.read(policy, cell);
                tracked = true;
            } else if (owner != 0) {
                decisions.count(VISIBLE_UNTRACKED);
            }
        }
        if (tracked) {
            if (params.apply().hit) {
                helper.apply();
                if (downlink) {
                    bit<48> seen;
                    last_seen.read(seen, cell);
                    bool claim = owner != key;
                    if (claim && owner != 0 && now - seen <= (bit<48>)idle_timeout) {
                        decisions.count(VISIBLE_UNTRACKED);
                    } else {
                        bit<32> seq = hdr.wire.tcp.seq_no;
                        bit<32> length = (bit<32>)md.tcp_payload_bytes;
                        if ((hdr.wire.tcp.flags & TCP_FLAG_SYN) != 0) {
                            length = length + 1;
                        }
                        if ((hdr.wire.tcp.flags & TCP_FLAG_FIN) != 0) {
                            length = length + 1;
                        }
                        bit<32> contiguous;
                        bit<32> highest;
                        forwarded_end.read(contiguous, cell);
                        forwarded_max.read(highest, cell);
                        if (claim) {
                            flow_key.write(cell, key);
                            flow_policy.write(cell, md.policy);
                            flow_links.write(cell, (bit<32>)md.lte_port << 16 | (bit<32>)md.wifi_port);
                            ack_seen.write(cell, 0);
                            dup_acks.write(cell, 0);
                            hold_time.write(cell, 0);
                            hold_since.write(cell, 0);
                            retransmits.write(cell, 0);
                            burst_ewma.write(cell, 0);
                            copy_epoch.write(cell, 0);
                            reported_ack.write(cell, 0);
                            contiguous = seq;
                            highest = seq;
                        }
                        /* Bytes at or above the highest forwarded so far are copied from now on if the helper is up. */
                        bit<32> copied_from = highest;
                        bit<32> seg_end = seq + length;
                        if (!seq_before(contiguous, seq) && seq_before(contiguous, seg_end)) {
                            contiguous = seg_end;
                        }
                        if (seq_before(highest, seg_end)) {
                            highest = seg_end;
                        }
                        forwarded_end.write(cell, contiguous);
                        forwarded_max.write(cell, highest);
                        last_seen.write(cell, now);
                        decisions.count(VISIBLE_DATA_TRACKED);
                        /* A policy that neither boosts nor retransmits (hold only) needs no copies: cloning
                         * every segment would cost the switch and the helper for nothing. */
                        bool needs_copies = boosts_max != 0 || requests_max != 0;
                        if (length > 0 && helper_ok && helper_epoch != 0 && needs_copies) {
                            bit<16> copies_epoch;
                            copy_epoch.read(copies_epoch, cell);
                            if (copies_epoch != helper_epoch) {
                                /* Confirmations of an earlier epoch may come from a helper that lost its copies. */
                                copy_epoch.write(cell, helper_epoch);
                                copy_start.write(cell, copied_from);
                                confirmed_end.write(cell, copied_from);
                            }
                            to_helper(HELPER_DATA_COPY);
                            decisions.count(VISIBLE_DATA_COPIED);
                        }
                    }
                } else if (confirmation) {
                    bit<16> epoch;
                    bit<1> valid;
                    bit<32> acked;
                    bit<32> confirmed;
                    copy_epoch.read(epoch, cell);
                    ack_seen.read(valid, cell);
                    receiver_ack.read(acked, cell);
                    confirmed_end.read(confirmed, cell);
                    bit<32> held_from = hdr.wire.tcp.seq_no;
                    bit<32> held_to = hdr.wire.tcp.ack_no;
                    /* Copies are freed only by the receiver's ACKs, so [receiver_ack, held_to) stays held until the
                     * receiver acknowledges it. A range starting past the receiver's ACK leaves a gap: ignored. */
                    if (helper_ok && helper_epoch != 0 && epoch == helper_epoch && valid == 1
                            && !seq_before(acked, held_from) && seq_before(confirmed, held_to)) {
                        confirmed_end.write(cell, held_to);
                        decisions.count(VISIBLE_COPIES_CONFIRMED);
                    }
                } else {
                    /* Uplink ACK of a tracked flow. */
                    last_seen.write(cell, now);
                    bit<32> links;
                    bit<32> contiguous;
                    bit<32> highest;
                    bit<1> valid;
                    bit<32> acked;
                    bit<32> sent;
                    bit<16> window;
                    bit<16> dups;
                    bit<32> held;
                    bit<48> held_since;
                    bit<8> requests;
                    bit<16> ewma;
                    bit<16> epoch;
                    bit<32> copies_from;
                    bit<32> reported;
                    bit<32> confirmed;
                    bit<48> last_request;
                    flow_links.read(links, cell);
                    forwarded_end.read(contiguous, cell);
                    forwarded_max.read(highest, cell);
                    ack_seen.read(valid, cell);
                    receiver_ack.read(acked, cell);
                    sent_ack.read(sent, cell);
                    receiver_window.read(window, cell);
                    dup_acks.read(dups, cell);
                    hold_time.read(held, cell);
                    hold_since.read(held_since, cell);
                    retransmits.read(requests, cell);
                    burst_ewma.read(ewma, cell);
                    copy_epoch.read(epoch, cell);
                    copy_start.read(copies_from, cell);
                    reported_ack.read(reported, cell);
                    confirmed_end.read(confirmed, cell);
                    requested_at.read(last_request, cell);

                    /* A steering mode that splits by rate (queue_aware_hold) sends a segment behind a queue whatever
                     * its delay: the hole may still wait in either link's queue, so the hold budget (the links'
                     * propagation difference) grows by the deeper queue's delay, and the dup-ACK allowance by every
                     * packet queued now, each of which may overtake the hole. */
                    bit<32> lte_depth;
                    bit<32> wifi_depth;
                    port_queue_depth.read(lte_depth, links >> 16);
                    port_queue_depth.read(wifi_depth, links & 0xffff);
                    bit<32> budget = hold_budget;
                    bit<32> queued = 0;
                    if (queue_aware == 1) {
                        bit<32> lte_service;
                        bit<32> wifi_service;
                        port_service_time.read(lte_service, links >> 16);
                        port_service_time.read(wifi_service, links & 0xffff);
                        bit<32> lte_wait = lte_depth * lte_service;
                        bit<32> wifi_wait = wifi_depth * wifi_service;
                        budget = budget + (lte_wait > wifi_wait ? lte_wait : wifi_wait);
                        queued = lte_depth + wifi_depth;
                    }

                    bit<32> ack = hdr.wire.tcp.ack_no;
                    /* RFC 2883: a first block below the ACK number, or inside the second block, reports a
                     * duplicate (a spurious retransmission) that lets the sender undo its window reduction. */
                    bool sack = hdr.sack_blocks[0].isValid();
                    bool dsack = sack && (seq_before(hdr.sack_blocks[0].left_edge, ack)
                                          || (hdr.sack_blocks[1].isValid()
                                              && !seq_before(hdr.sack_blocks[0].left_edge,
                                                             hdr.sack_blocks[1].left_edge)
                                              && !seq_before(hdr.sack_blocks[1].right_edge,
                                                             hdr.sack_blocks[0].right_edge)));
                    bool helper_copies = helper_ok && helper_epoch != 0 && epoch == helper_epoch;
                    bool pure = md.tcp_payload_bytes == 0
                                && (hdr.wire.tcp.flags & (TCP_FLAG_SYN | TCP_FLAG_FIN | TCP_FLAG_RST)) == 0;
                    /* RFC 5681's dup-ACK keeps the window; but a receiver's SACK blocks tell a SACK sender of the
                     * data above the hole whatever the window (Linux grows the window on out-of-order data too), so
                     * an ACK with blocks counts as a dup-ACK even when its window changed. */
                    bool dup = valid == 1 && pure && ack == acked
                               && (hdr.wire.tcp.window == window || sack)
                               && seq_before(ack, highest);

                    if (dup) {
                        window = hdr.wire.tcp.window;
                        decisions.count(VISIBLE_DUP_ACK);
                        if (dups != 0xffff) {
                            dups = dups + 1;
                        }
                        /* Every byte from the receiver's ACK on was cloned to the helper in its current epoch. */
                        bool covered = helper_copies && !seq_before(acked, copies_from);
                        /* The sender considers [acked, sent) delivered: a hole there is repaired by the helper or
                         * never. Boosts only go where the helper confirmed copies, so it has them (unless it died). */
                        bool owing = seq_before(acked, sent);
                        bool owed_repair = owing && helper_ok;
                        /* Where steering splits by rate, an owed hole is most likely a segment still waiting behind
                         * the slower link's queue: it is asked for only a budget after the debt last moved (a boost,
                         * a receiver's ACK short of it, a request; requested_at), its dup-ACKs held meanwhile, so
                         * that their SACK blocks do not make the sender retransmit it either (Linux reads the blocks
                         * of ACKs below its own). Elsewhere the first request of a burst goes at once: a sender that
                         * considers the hole delivered may send nothing more until its retransmission timeout. */
                        bool owed_wait_over = now - last_request >= (bit<48>)budget;
                        bool waiting_owed = owed_repair && queue_aware == 1 && !owed_wait_over;
                        bool request_owed = owed_repair && ((requests == 0 && queue_aware == 0) || owed_wait_over);
                        bool spare = lte_depth <= boost_depth && wifi_depth <= boost_depth;
                        bool timestamps = hdr.tcp_timestamps.isValid()
                                          && hdr.tcp_timestamps.nop1 == TCP_OPTION_NOP
                                          && hdr.tcp_timestamps.nop2 == TCP_OPTION_NOP
                                          && hdr.tcp_timestamps.kind == TCP_OPTION_TIMESTAMPS
                                          && hdr.tcp_timestamps.length == TCP_OPTION_TIMESTAMPS_LENGTH;
                        /* Options the switch can read all of: none, timestamps only, or timestamps and SACK blocks
                         * in Linux's layout (the parser extracts the blocks only then). */
                        bool options_read = hdr.wire.tcp.data_offset == TCP_DATA_OFFSET_MIN
                                            || (timestamps && hdr.wire.tcp.data_offset == TCP_DATA_OFFSET_TIMESTAMPS)
                                            || (timestamps && sack);
                        bit<32> target = sent + (bit<32>)mss * (bit<32>)dups;
                        if (seq_before(contiguous, target)) {
                            target = contiguous;
                        }
                        if (seq_before(confirmed, target)) {
                            target = confirmed;
                        }
                        /* No SACK block may lie below the boosted ACK: the sender would read the first as a D-SACK
                         * (RFC 2883) and the others as stale. Boosting up to the lowest left edge keeps every block
                         * valid as the receiver sent it, so the blocks are never rewritten. */
                        if (sack && seq_before(hdr.sack_blocks[0].left_edge, target)) {
                            target = hdr.sack_blocks[0].left_edge;
                        }
                        if (hdr.sack_blocks[1].isValid() && seq_before(hdr.sack_blocks[1].left_edge, target)) {
                            target = hdr.sack_blocks[1].left_edge;
                        }
                        if (hdr.sack_blocks[2].isValid() && seq_before(hdr.sack_blocks[2].left_edge, target)) {
                            target = hdr.sack_blocks[2].left_edge;
                        }
                        bit<32> hold_limit = (((bit<32>)slack + queued) << VISIBLE_EWMA_FRACTION_BITS) + (bit<32>)ewma;
                        /* A dup-ACK a hold budget after the burst's last boost comes from a sender that has
                         * nothing left to send but retransmission timeouts: boosting it would hide the owed hole
                         * for another timeout, so it asks the helper for the hole instead. */
                        bool stalled = owing && now - held_since >= (bit<48>)budget;
                        if (requests == 0 && spare && covered && options_read && dups <= boosts_max && !stalled
                                && seq_before(sent, target)) {
                            hdr.wire.tcp.checksum = checksum_update(hdr.wire.tcp.checksum, 16w0 ++ hdr.wire.tcp.ack_no,
                                                                    16w0 ++ target);
                            hdr.wire.tcp.ack_no = target;
                            sent = target;
                            held = 0;
                            held_since = now;
                            last_request = now;
                            decisions.count(VISIBLE_BOOSTED);
                        } else if (waiting_owed && !dsack) {
                            mark_to_drop(std_md);
                            decisions.count(VISIBLE_HELD);
                        } else if (!request_owed && requests == 0 && held < budget && !dsack
                                   && ((bit<32>)dups << VISIBLE_EWMA_FRACTION_BITS) <= hold_limit) {
                            /* Not while a request for owed bytes is due: the sender ignores these dup-ACKs'
                             * ACK numbers anyway (they are below its ACK), and its next one may be a retransmission
                             * timeout away. Never a D-SACK: held, the sender could not undo the reduction of a
                             * spurious retransmission. */
                            if (held_since == 0) {
                                held_since = now;
                            }
                            held = held + (bit<32>)(now - held_since);
                            held_since = now;
                            mark_to_drop(std_md);
                            decisions.count(VISIBLE_HELD);
                        } else if ((requests < requests_max && covered && !waiting_owed) || request_owed) {
                            if (requests != 0xff) {
                                requests = requests + 1;
                            }
                            last_request = now;
                            to_helper(HELPER_RETRANSMIT);
                            decisions.count(VISIBLE_RETRANSMIT_REQUESTED);
                        } else {
                            decisions.count(VISIBLE_DUP_ACK_FORWARDED);
                        }
                    } else if (valid == 0 || seq_before(acked, ack)) {
                        if (dups != 0) {
                            bit<32> sample = (bit<32>)dups << VISIBLE_EWMA_FRACTION_BITS;
                            bit<32> average = (bit<32>)ewma;
                            if (sample > average) {
                                average = average + ((sample - average) >> alpha);
                            } else {
                                average = average - ((average - sample) >> beta);
                            }
                            ewma = average > 0xffff ? 16w0xffff : average[15:0];
                            dups = 0;
                        }
                        /* Holding hides reordering only if the sender never hears of it: a new ACK that still
                         * reports blocks above its hole (more segments in flight on the slower link) would tell it
                         * as a dup-ACK would, and the sender would count the hole's later arrival as reordering.
                         * So while the burst it ends stayed within the hold budget and nothing is owed, its blocks
                         * become NOPs (not a D-SACK: that one reports a spurious retransmission the sender may
                         * undo), and the next hole's hold clock starts now. SACK is advisory (RFC 2018): a real
                         * loss still shows, in the dup-ACKs released once the budget is spent. With queue_aware_hold
                         * an ACK short of owed bytes loses its blocks too: they are above the hole the switch waits
                         * for, and below the sender's own ACK they could only make it retransmit. */
                        bool owed_after = valid == 1 && helper_ok && seq_before(ack, sent);
                        bool hide = valid == 1 && hold_budget != 0 && sack && !dsack
                                    && ((held < budget && !seq_before(ack, sent)) || (owed_after && queue_aware == 1));
                        if (hide) {
                            sack_to_nops(hdr);
                            decisions.count(VISIBLE_SACK_HIDDEN);
                        }
                        held = 0;
                        held_since = hide ? now : 0;
                        requests = 0;
                        if (valid == 0 || seq_before(sent, ack)) {
                            sent = ack;
                        }
                        /* The receiver has these bytes, so they went through this switch. */
                        if (seq_before(contiguous, ack)) {
                            contiguous = ack;
                        }
                        if (seq_before(highest, contiguous)) {
                            highest = contiguous;
                        }
                        acked = ack;
                        window = hdr.wire.tcp.window;
                        valid = 1;
                        if (owed_after) {
                            /* As a request of this burst it keeps the burst from boosting: the sender's window
                             * starts at the boosted ACK, so debt piled on debt would move its right edge ever
                             * further past the receiver's. With queue_aware_hold it only restarts the owed clock:
                             * the next owed segment is most likely on its way too. */
                            requests = 1;
                            last_request = now;
                        }
                        if (owed_after && queue_aware == 0) {
                            /* The receiver filled a hole but still lacks bytes the sender considers delivered: ask
                             * for the next one now. A sender whose window is full of bytes past them sends nothing
                             * until its retransmission timeout, so no dup-ACK may come for seconds. The request
                             * carries the receiver's ACK, so it reports it too. */
                            reported = ack;
                            to_helper(HELPER_RETRANSMIT);
                            decisions.count(VISIBLE_RETRANSMIT_REQUESTED);
                        } else if (helper_copies && ack - reported >= report_every) {
                            reported = ack;
                            to_helper(HELPER_ACK_REPORT);
                            decisions.count(VISIBLE_ACK_REPORTED);
                        }
                        decisions.count(VISIBLE_NEW_ACK);
                    } else if (ack == acked) {
                        window = hdr.wire.tcp.window;
                    }

                    forwarded_end.write(cell, contiguous);
                    forwarded_max.write(cell, highest);
                    ack_seen.write(cell, valid);
                    receiver_ack.write(cell, acked);
                    sent_ack.write(cell, sent);
                    receiver_window.write(cell, window);
                    dup_acks.write(cell, dups);
                    hold_time.write(cell, held);
                    hold_since.write(cell, held_since);
                    retransmits.write(cell, requests);
                    burst_ewma.write(cell, ewma);
                    reported_ack.write(cell, reported);
                    requested_at.write(cell, last_request);
                }
            }
        }
    }
}

#endif  // TNG_V1MODEL_VISIBLE_P4
