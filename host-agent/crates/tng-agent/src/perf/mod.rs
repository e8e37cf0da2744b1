//! `tng perf`: one workload generator for tng, kernel TCP and Linux MPTCP, so every comparison uses the same
//! workload.

pub mod client;
pub mod command;
mod cpu;
pub mod kernel;
pub mod protocol;
pub mod server;
pub mod stats;

use tokio::io::{AsyncRead, AsyncWrite};

/// Which transport carries a perf workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Tng,
    Tcp,
    Mptcp,
}

/// A reliable byte stream: a kernel socket or a tng stream.
pub trait ByteStream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> ByteStream for T {}
pub type BoxStream = Box<dyn ByteStream>;
