//! Reading evenflush traces back: locating every rank's files, streaming their events, and the
//! summaries built on them; reconstruction of the original timing (removing DP' and DP,
//! happened-before repair) and comparison of two runs.

pub mod callsites;
pub mod clock;
pub mod collect;
pub mod compare;
pub mod distribution;
pub mod export;
pub mod funcs;
pub mod hb;
pub mod hist;
pub mod info;
pub mod job;
pub mod lanes;
mod mapping;
pub mod members;
pub mod memory;
mod output;
pub mod oversubscription;
pub mod pipeline;
pub mod progress;
pub mod rebuild;
pub mod report;
pub mod span;
pub mod times;
pub mod trace;
pub mod window;

pub use trace::{Trace, TraceError};
