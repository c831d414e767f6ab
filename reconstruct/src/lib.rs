//! Reconstruction of a trace's original timing: every timestamp mapped with the suspensions
//! (DP') and the recorder's cost (DP) removed, communication matched and happened-before
//! repaired, the result written as a trace of the same format; alone or as an MPI job. Reading
//! the trace is the `trace` crate's; what is shown of it, the `views` crate's.

pub mod hb;
pub mod job;
mod mapping;
pub mod match_index;
pub mod matches;
pub mod options;
mod output;
pub mod pipeline;
pub mod rebuild;
pub mod summary;
