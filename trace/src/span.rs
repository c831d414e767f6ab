//! A rank's span: from the end of its first `MPI_Init` (the `InitDone` marker) to the start of its
//! first `MPI_Finalize` (`FinalizeStart`), in the global clock (rank 0's), seconds. The run's
//! span is the longest over its ranks. Start-up and the final trace write lie outside it, so it
//! is what the program itself took between the two calls; `info`, `compare` and `validate`
//! quote it, and `reconstruct` quotes it before and after removing DP' and DP.
//!
//! A rank that never reached `MPI_Finalize` (a job killed at its time limit, a crash, `exit`
//! without finalize) ends its span where recording stopped: its `AbnormalEnd` marker, which
//! follows everything it recorded ([`end_of`]). Such a span is what the program did until it
//! was stopped, not a run's length.
//!
//! Which markers count is decided where the metadata is gathered ([`RankMeta::see`]: the first
//! of each); how ticks become global time, by the time map ([`TimeMap`]).

use crate::clock::{MapCursor, TimeMap};
use crate::definitions::RankMeta;

/// Where a span ends, from a rank's (or a lane's) first `FinalizeStart` and first `AbnormalEnd`.
pub use format::span_end as end_of;

/// One rank's span, s; `None` without a start and an end.
pub fn global_s(meta: &RankMeta) -> Option<f64> {
    let (init, finalize) = (meta.init_done?, meta.span_end()?);
    let map = TimeMap::new(meta);
    let mut cursor = MapCursor::default();
    Some((map.global_ns(finalize, &mut cursor) - map.global_ns(init, &mut cursor)) / 1e9)
}

/// The run's span: the longest of its ranks', s (0 when no rank has both markers).
pub fn longest_s(metas: &[RankMeta]) -> f64 {
    metas.iter().filter_map(global_s).fold(0.0, f64::max)
}
