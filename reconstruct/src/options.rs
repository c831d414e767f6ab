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

/// How waits are reconstructed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Model {
    /// The paper's: DP' and DP are subtracted rank by rank, waits kept as recorded (and with
    /// `hb`, lengthened where they would end before what they wait for).
    #[default]
    Subtract,
    /// Every wait recomputed from its partners in the reconstructed run (`hb::repair`), with
    /// intrinsic costs and transfer times learned from the run itself. Removes DP' and DP.
    Replay,
}

impl Model {
    pub fn name(self) -> &'static str {
        match self {
            Model::Subtract => "subtract",
            Model::Replay => "replay",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Options {
    pub remove: Remove,
    pub model: Model,
    /// Repair happened-before violations (otherwise they are only counted).
    pub hb: bool,
    /// Events per output chunk and stream.
    pub chunk_events: usize,
    pub zstd_level: i32,
    /// With `hb`: no message arrives sooner than this after its send started (ns).
    pub min_latency_ns: u64,
    /// Threads to read, map and write on (0: every core). The output does not depend on it.
    pub threads: usize,
    /// When waits are moved: match the written output again to count its violations, and fail
    /// if the pass's own count (see [`hb::OutputViolations`]) differs, rather than trust it.
    pub verify: bool,
}

impl Options {
    /// Whether the output times come out of the matcher (every event passes through it).
    pub fn moves_waits(&self) -> bool {
        self.hb || self.model == Model::Replay
    }

    pub(crate) fn repair(&self) -> hb::Repair {
        hb::Repair {
            enabled: self.moves_waits(),
            min_latency_ns: self.min_latency_ns,
            replay: self.model == Model::Replay,
            learn: false,
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            remove: Remove::DpPrime,
            model: Model::Subtract,
            hb: false,
            chunk_events: OUTPUT_CHUNK_EVENTS,
            zstd_level: 1,
            min_latency_ns: hb::DEFAULT_MIN_LATENCY_NS,
            threads: 0,
            verify: false,
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

/// Events per output chunk, unless many lanes make them fewer ([`output_chunk_events`]). Each lane
/// buffers a chunk's decoded events before encoding them, so a chunk that outgrows the core's
/// cache makes every event's copy a miss: on the 16 M-event, 8-lane bench trace 2^13 ran 0.92×
/// the time of 2^16 (subtract and replay, one thread), in half the memory, for a file 0.65 %
/// larger (its chunk headers); 2^12 ran 0.91× for +1.4 %, 2^14 0.97× for +0.3 %
/// (paper-notes/reconstruct-issue31.md).
pub const OUTPUT_CHUNK_EVENTS: usize = 1 << 13;

/// Output events buffered over all lanes, at most (a few tens of MiB in their typed columns).
const OUTPUT_EVENTS_BUFFERED: usize = 1 << 20;
/// Output chunks are not made smaller than this to save memory: chunk headers and compression
/// would start to cost.
const MIN_CHUNK_EVENTS: usize = 256;

/// Encoded output held back over all ranks, at most, so that a rank's file is opened once for
/// several chunks: each append opens and closes the file (open files stay few), and with
/// thousands of ranks a chunk is [`MIN_CHUNK_EVENTS`] events, about 1 KiB.
const OUTPUT_BYTES_HELD: usize = 32 << 20;
/// ...and a rank's file is appended to once this many bytes wait at most.
const MAX_BYTES_PER_WRITE: usize = 1 << 20;

/// Encoded bytes a rank's output gathers before they are appended to its file (a rank's last
/// chunks are appended whatever their size).
pub(crate) fn output_bytes_per_write(ranks: usize) -> usize {
    (OUTPUT_BYTES_HELD / ranks.max(1)).min(MAX_BYTES_PER_WRITE)
}

/// Every lane buffers one output chunk: with many lanes, smaller chunks keep that bounded.
pub(crate) fn output_chunk_events(opts: &Options, lanes: usize) -> usize {
    opts.chunk_events
        .min((OUTPUT_EVENTS_BUFFERED / lanes.max(1)).max(MIN_CHUNK_EVENTS))
        .max(1)
}
