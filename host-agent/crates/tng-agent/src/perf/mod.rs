//! `tng perf`: one workload generator for tng, kernel TCP and Linux MPTCP, so every comparison uses the same
//! workload.

pub mod client;
mod cpu;
pub mod kernel;
pub mod protocol;
pub mod server;
mod sockopt;
pub mod stats;
