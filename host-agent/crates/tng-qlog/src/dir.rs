//! The factory drivers plug into `TransportConfig::qlog`: one file per connection in a directory.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tng_proto::qlog::{QlogConfig, QlogFactory, QlogSink, TraceStart};
use tng_proto::streams::Side;

use crate::writer::QlogWriter;

/// What the core's `Time` is measured against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// The driver maps the wall clock onto `Time` (the agent): the trace's `reference_time` is the wall-clock time
    /// of `Time::ZERO`.
    Wall,
    /// Virtual time (the simulator): `reference_time` is 0 and event times are simulated milliseconds.
    Virtual,
}

/// Writes each connection's trace into `DIR/<original connection id>-<client|server>.sqlog`.
#[derive(Clone, Debug)]
pub struct QlogDir {
    dir: PathBuf,
    /// Names the program in each trace's vantage point (`tng-agent`, `tng-sim`).
    name: String,
    clock: Clock,
}

impl QlogDir {
    /// Creates `dir` if needed.
    pub fn new(dir: &Path, name: &str, clock: Clock) -> std::io::Result<QlogDir> {
        std::fs::create_dir_all(dir)?;
        Ok(QlogDir { dir: dir.to_path_buf(), name: name.to_string(), clock })
    }

    /// The configuration value that turns tracing on.
    pub fn into_config(self) -> QlogConfig {
        QlogConfig(Arc::new(self))
    }

    /// The file a connection's trace goes to.
    pub fn path_for(&self, trace: &TraceStart) -> PathBuf {
        let side = match trace.side {
            Side::Client => "client",
            Side::Server => "server",
        };
        self.dir.join(format!("{:016x}-{side}.sqlog", trace.original_connection_id))
    }

    fn reference_time_ms(&self, trace: &TraceStart) -> f64 {
        match self.clock {
            Clock::Virtual => 0.0,
            Clock::Wall => {
                let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64() * 1e3;
                wall - trace.now.as_nanos() as f64 / 1e6
            }
        }
    }
}

impl QlogFactory for QlogDir {
    fn start(&self, trace: &TraceStart) -> Option<Box<dyn QlogSink>> {
        let path = self.path_for(trace);
        let file = match File::create(&path) {
            Ok(file) => file,
            Err(error) => {
                // Tracing is a diagnostic: a connection goes on untraced rather than fail.
                eprintln!("qlog: cannot create {}: {error}; this connection is not traced", path.display());
                return None;
            }
        };
        let writer = QlogWriter::new(BufWriter::new(file), &self.name, trace, self.reference_time_ms(trace));
        Some(Box::new(writer))
    }
}
