//! What evenflush shows of a trace: `info` and its histograms, `report` (the MPIPROF-style
//! profile, with call sites and memory), `compare` (one run against references), the timeline
//! picture and the Perfetto, Chrome JSON and OTF2 exports. Views read traces through the `trace`
//! crate; of `reconstruct` they use only the messages it matches (`reconstruct::matches`).

pub mod callsites;
pub mod compare;
pub mod distribution;
pub mod export;
pub mod hist;
pub mod info;
pub mod memory;
pub mod report;
