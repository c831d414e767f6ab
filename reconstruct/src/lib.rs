//! Reading evenflush traces back: locating every rank's files, streaming their events, and the
//! summaries built on them. Reconstruction (removing DP' and DP, happened-before repair) and run
//! comparison are added by the reconstruct issue.

pub mod info;
pub mod trace;

pub use trace::{Trace, TraceError};
