//! What `evenflush reconstruct` is asked to do, and how it fails.

use std::path::PathBuf;

use serde::Serialize;
use trace::TraceError;

use crate::hb;

/// Which perturbation to take out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Remove {
    /// The suspensions (DP'): recovers G+.
    DpPrime,
    /// The recorder's per-event cost (DP) only.
    Dp,
    /// Both: recovers G.
    Both,
}

impl Remove {
    pub fn dp_prime(self) -> bool {
        matches!(self, Remove::DpPrime | Remove::Both)
    }
    pub fn dp(self) -> bool {
        matches!(self, Remove::Dp | Remove::Both)
    }
    pub fn name(self) -> &'static str {
        match self {
            Remove::DpPrime => "dpprime",
            Remove::Dp => "dp",
            Remove::Both => "both",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Options {
    pub remove: Remove,
    /// Repair happened-before violations (otherwise they are only counted).
    pub hb: bool,
    /// Events per output chunk and stream.
    pub chunk_events: usize,
    pub zstd_level: i32,
    /// With `hb`: no message arrives sooner than this after its send started (ns).
    pub min_latency_ns: u64,
    /// Threads to read, map and write on (0: every core). The output does not depend on it.
    pub threads: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            remove: Remove::DpPrime,
            hb: false,
            chunk_events: 1 << 16,
            zstd_level: 1,
            min_latency_ns: hb::DEFAULT_MIN_LATENCY_NS,
            threads: 0,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error("writing {}", path.display())]
    Output {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {what}", path.display())]
    BadOutput { path: PathBuf, what: String },
    /// Between the processes of an MPI job (`mpirun -np N evenflush reconstruct`).
    #[error("MPI job: {0}")]
    Job(String),
}

/// Output events buffered over all lanes, at most (a few tens of MiB in their typed columns).
const OUTPUT_EVENTS_BUFFERED: usize = 1 << 20;
/// Output chunks are not made smaller than this to save memory: chunk headers and compression
/// would start to cost.
const MIN_CHUNK_EVENTS: usize = 256;

/// Every lane buffers one output chunk: with many lanes, smaller chunks keep that bounded.
pub(crate) fn output_chunk_events(opts: &Options, lanes: usize) -> usize {
    opts.chunk_events
        .min((OUTPUT_EVENTS_BUFFERED / lanes.max(1)).max(MIN_CHUNK_EVENTS))
        .max(1)
}
