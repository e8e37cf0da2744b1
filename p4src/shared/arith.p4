/*
 * Arithmetic helpers of the main pipeline, plain functions that map to any target: incremental Internet checksum
 * updates (RFC 1624, equation 3: HC' = ~(~HC + ~m + m')) wherever a field covered by a TCP or UDP checksum is
 * rewritten, and wraparound-safe TCP sequence comparisons.
 */
#ifndef TNG_ARITH_P4
#define TNG_ARITH_P4

/* The checksum after up to three covered 16-bit words change from old_words to new_words (pad unused words with the
 * same value on both sides: adding ~w + w changes nothing). One sum, folded twice: no expression is duplicated. */
bit<16> checksum_update(in bit<16> checksum, in bit<48> old_words, in bit<48> new_words) {
    bit<32> sum = (bit<32>)(~checksum)
                  + (bit<32>)(~old_words[47:32]) + (bit<32>)(~old_words[31:16]) + (bit<32>)(~old_words[15:0])
                  + (bit<32>)new_words[47:32] + (bit<32>)new_words[31:16] + (bit<32>)new_words[15:0];
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return ~sum[15:0];
}

/* 32-bit sequence-number comparisons modulo 2^32 (RFC 1982): a before b. */
bool seq_before(in bit<32> a, in bit<32> b) {
    return (int<32>)(a - b) < 0;
}

#endif  // TNG_ARITH_P4
