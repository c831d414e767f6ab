//! Reading evenflush traces back: finding and opening every rank's files (one directory, or a run
//! collected from several), streaming their events and lanes, each rank's definitions from the
//! first pass, the clocks aligned and the time map, and the window a view looks at. Everything
//! here reads; `reconstruct` and `views` build on it.

pub mod clock;
pub mod collect;
pub mod comm_identity;
pub mod definitions;
pub mod error;
pub mod files;
pub mod funcs;
pub mod lanes;
pub mod members;
pub mod meta_cache;
pub mod open;
pub mod oversubscription;
pub mod parallel;
pub mod progress;
pub mod scan;
pub mod slurm;
pub mod span;
pub mod times;
pub mod window;

pub use error::{Skipped, TraceError};
pub use files::RankFiles;
pub use open::Trace;
