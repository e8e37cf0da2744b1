//! Deterministic discrete-event network simulator for tng.
//!
//! Virtual time, seeded randomness and a total event order make every run reproducible: the same scenario and
//! seed give byte-identical results. The network (links, queues, loss, traces, switch feedback) is modelled here;
//! the endpoints are the real `tng-proto` state machines.

pub mod apps;
pub mod bench;
pub mod content;
pub mod cpu_clock;
pub mod cross_traffic;
pub mod datagram;
pub mod document;
pub mod engine;
pub mod event_queue;
pub mod feedback;
pub mod ledger;
pub mod link;
pub mod loss;
pub mod metrics;
pub mod network;
pub mod observation;
pub mod relays;
pub mod report;
pub mod rng;
pub mod scenario;
pub mod tail_drop;
pub mod topology;
pub mod trace;
pub mod transport;
pub mod workload;
