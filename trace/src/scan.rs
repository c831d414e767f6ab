//! The first pass: every rank's definitions ([`RankMeta`]), read on every core, and the clocks
//! aligned. Views and commands that need only the metadata of a trace get it here.

use std::collections::BTreeSet;

use format::Event;

use crate::clock::align_clocks;
use crate::definitions::RankMeta;
use crate::error::TraceError;
use crate::files::RankFiles;
use crate::open::{Trace, for_each_misc_event};
use crate::parallel::{map_indexed, threads};

/// The first pass over every rank, on every core.
pub fn scan(trace: &Trace) -> Result<Vec<RankMeta>, TraceError> {
    scan_with(trace, 0)
}

/// [`scan`] on `threads` threads (0: every core).
pub fn scan_with(trace: &Trace, threads_wanted: usize) -> Result<Vec<RankMeta>, TraceError> {
    let mut metas = map_indexed(trace.ranks.len(), threads(threads_wanted), |i| {
        scan_rank(&trace.ranks[i])
    })
    .into_iter()
    .collect::<Result<Vec<_>, _>>()?;
    align_clocks(&mut metas);
    Ok(metas)
}

/// The first pass over one rank: reads every chunk once, keeps only the metadata (so it decodes
/// only the misc events).
pub fn scan_rank(files: &RankFiles) -> Result<RankMeta, TraceError> {
    scan_rank_keeping(files, |_, _| {})
}

/// [`scan_rank`], showing `kept` each event the metadata took, with its stream, in order.
pub fn scan_rank_keeping(
    files: &RankFiles,
    mut kept: impl FnMut(u32, &Event),
) -> Result<RankMeta, TraceError> {
    let mut meta = RankMeta {
        rank: files.rank,
        ..Default::default()
    };
    let mut streams = BTreeSet::new();
    let mut events = 0u64;
    let (clock, skipped) = for_each_misc_event(
        files,
        |chunk| {
            streams.insert(chunk.stream);
            events += chunk.events;
        },
        |stream, event| {
            if meta.see(stream, event) {
                kept(stream, event);
            }
        },
    )?;
    meta.clock = clock;
    meta.skipped = skipped;
    meta.streams = streams;
    meta.events = events;
    Ok(meta)
}
