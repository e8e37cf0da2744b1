//! linkem: a user-space link emulator bridging two network interfaces, in the spirit of Mahimahi.
//!
//! Each direction has a rate or a Mahimahi trace, a one-way delay with optional jitter, Bernoulli or
//! Gilbert-Elliott loss, a drop-tail queue with optional ECN marking, and counters. See `docs/linkem.md`.

pub mod bench;
pub mod bridge;
pub mod checksum;
pub mod control;
pub mod counters;
pub mod ecn;
pub mod gentrace;
pub mod lab;
pub mod link;
pub mod loss;
pub mod packet_socket;
pub mod random;
pub mod spec;
pub mod trace;
pub mod traffic;
pub mod units;
