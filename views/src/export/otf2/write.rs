//! Writing an archive: open it, stream each rank's events into its locations (calls through
//! [`super::calls`], suspensions here), close the event files, then write the definitions
//! ([`super::definitions`]).

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::path::Path;

use format::requests::{MatchedProbes, PersistentRequests};
use format::{Event, Suspension};

use super::Otf2Summary;
use super::calls::{RankCtx, Special, UNNAMED, write_call};
use super::comms::CommDefs;
use super::definitions::{Definitions, write_definitions};
use super::ffi::{self, Archive, check};
use super::io::IoState;
use super::location::{Lane, Writer, location_id};
use super::rma::RmaState;
use crate::export::{ExportError, function_table};
use trace::Trace;
use trace::clock::{MapCursor, TimeMap};
use trace::funcs::{Deferred, FuncClass};
use trace::meta_cache::scan_for;
use trace::open::for_each_event;
use trace::window::Window;

fn remove_old_archive(out: &Path) -> Result<(), ExportError> {
    std::fs::create_dir_all(out).map_err(|e| ExportError::io(out, e))?;
    for name in ["traces.otf2", "traces.def"] {
        let p = out.join(name);
        if p.exists() {
            std::fs::remove_file(&p).map_err(|e| ExportError::io(&p, e))?;
        }
    }
    let dir = out.join("traces");
    if dir.is_dir() {
        std::fs::remove_dir_all(&dir).map_err(|e| ExportError::io(&dir, e))?;
    }
    Ok(())
}

pub(super) fn export(
    trace: &Trace,
    out: &Path,
    window: &Window,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Otf2Summary, ExportError> {
    let metas = scan_for(trace, !window.is_everything())?;
    remove_old_archive(out)?;
    let total: u64 = metas.iter().map(|m| m.events).sum();
    let mut comm_defs = CommDefs::new(&metas, trace.world_size);
    let tables: Vec<HashMap<u16, (String, FuncClass)>> = metas.iter().map(function_table).collect();
    // Regions in name order so that every rank and every run numbers them alike.
    let mut region_names: BTreeMap<String, FuncClass> = BTreeMap::new();
    for t in &tables {
        for (name, class) in t.values() {
            region_names.insert(name.clone(), *class);
        }
    }
    // Calls of functions with no definition (a damaged trace) still need a region.
    region_names.insert(UNNAMED.to_string(), FuncClass::Other);
    let regions: HashMap<String, u32> = region_names
        .keys()
        .enumerate()
        .map(|(i, n)| (n.clone(), i as u32))
        .collect();

    let path = CString::new(out.to_string_lossy().as_bytes())
        .map_err(|_| ExportError::Other("output path contains a NUL byte".into()))?;
    let Some(archive) = Archive::create(&path, c"traces", 1 << 20, 4 << 20) else {
        return Err(ExportError::Other(format!(
            "OTF2: could not create an archive in {}",
            out.display()
        )));
    };
    check(archive.set_flush_callbacks(), "setting the flush callbacks")?;
    check(
        archive.set_serial_collective_callbacks(),
        "setting the collective callbacks",
    )?;
    let creator =
        CString::new(format!("evenflush {}", env!("CARGO_PKG_VERSION"))).unwrap_or_default();
    check(archive.set_creator(&creator), "setting the creator")?;
    let evt = archive.open_evt_files()?;

    let mut wr = Writer {
        latest: archive.latest(),
        min_ts: u64::MAX,
        max_ts: 0,
        summary: Otf2Summary::default(),
    };
    // (rank, stream, location id, events)
    let mut locations: Vec<(u32, u32, u64, u64)> = Vec::new();
    // Ranks whose I/O handle was created, with their MPI_COMM_SELF.
    let mut io_handles: Vec<(u32, Option<u32>)> = Vec::new();
    let mut any_io = false;
    let mut parents: Vec<(u32, u32)> = Vec::new();
    let mut done = 0u64;
    for (slot, (files, meta)) in trace.ranks.iter().zip(&metas).enumerate() {
        let map = TimeMap::new(meta);
        let mut rc = RankCtx {
            funcs: &tables[slot],
            special: tables[slot]
                .iter()
                .filter_map(|(id, (name, _))| Some((*id, Special::of(name)?)))
                .collect(),
            deferred: tables[slot]
                .iter()
                .filter_map(|(id, (name, _))| Some((*id, Deferred::of(name)?)))
                .collect(),
            persistent: PersistentRequests::default(),
            probes: MatchedProbes::default(),
            regions: &regions,
            comms: &comm_defs.ranks[slot].comms,
            defs: &comm_defs,
            slot,
            io_handle: files.rank,
            open: HashMap::new(),
            window,
            rma: RmaState::default(),
            io: IoState::default(),
            parents: Vec::new(),
        };
        let mut lanes: BTreeMap<u32, (Lane, MapCursor)> = BTreeMap::new();
        let mut failed: Option<ExportError> = None;
        let rank = files.rank;
        let no_writer = |stream: u32| {
            ExportError::Other(format!(
                "OTF2: no event writer for rank {rank} thread {stream}"
            ))
        };
        if !window.has_rank(rank) {
            // Defined but empty: the definitions (location groups, the MPI locations group,
            // communicators) then stay those of the whole run.
            for &stream in &meta.streams {
                let loc = location_id(rank, stream);
                let writer = evt.writer(loc).ok_or_else(|| no_writer(stream))?;
                check(evt.close_writer(writer), "closing an event writer")?;
                locations.push((rank, stream, loc, 0));
            }
            wr.summary.cut += meta.events;
            done += meta.events;
            continue;
        }
        let (_, skipped) = for_each_event(
            files,
            |chunk| {
                done += chunk.events;
                progress(done, total);
            },
            |stream, e| {
                let mut one = |stream, e: &Event| {
                    if failed.is_some() {
                        return;
                    }
                    let (lane, cur) = match lanes.entry(stream) {
                        Entry::Occupied(o) => o.into_mut(),
                        Entry::Vacant(v) => match evt.writer(location_id(rank, stream)) {
                            Some(writer) => v.insert((Lane::new(writer), MapCursor::default())),
                            None => {
                                failed = Some(no_writer(stream));
                                return;
                            }
                        },
                    };
                    if let Event::Completion(c) = e {
                        if let Some((_, comps)) = &mut lane.pending {
                            comps.push(*c);
                        }
                        return;
                    }
                    if let Some((call, comps)) = lane.pending.take()
                        && let Err(err) =
                            write_call(&mut wr, lane, &mut rc, &map, cur, &call, &comps)
                    {
                        failed = Some(err);
                        return;
                    }
                    match e {
                        Event::Call(c) => {
                            lane.pending = Some((*c, Vec::new()));
                            lane.call_defs = std::mem::take(&mut lane.new_defs);
                        }
                        Event::CommDef { id, .. } => lane.new_defs.push((*id, false)),
                        Event::WinDef { id, .. } => lane.new_defs.push((*id, true)),
                        Event::Suspension(s) => {
                            let (ga, gb) = (
                                map.absolute(map.global_ns(s.start, cur)),
                                map.absolute(map.global_ns(s.end, cur)),
                            );
                            if let Err(err) = write_suspension(&mut wr, lane, s, (ga, gb), window) {
                                failed = Some(err);
                            }
                        }
                        _ => {}
                    }
                };
                crate::export::as_drawn(e, |e| one(stream, e));
            },
        )?;
        if let Some(err) = failed {
            return Err(err);
        }
        for (stream, (mut lane, mut cur)) in lanes {
            if let Some((call, comps)) = lane.pending.take() {
                write_call(&mut wr, &mut lane, &mut rc, &map, &mut cur, &call, &comps)?;
            }
            check(evt.close_writer(lane.writer), "closing an event writer")?;
            locations.push((rank, stream, location_id(rank, stream), lane.written.events));
        }
        wr.summary.skipped.extend(skipped);
        wr.summary.rma_operations += rc.rma.operations;
        wr.summary.io_operations += rc.io.operations;
        if rc.io.used {
            io_handles.push((rank, comm_defs.ranks[slot].comms.get(&1).copied()));
        }
        any_io |= rc.io.any;
        parents.append(&mut rc.parents);
    }
    check(evt.close(), "closing the event files")?;

    // Each location needs its (here empty) local definitions file.
    let defs = archive.open_def_files()?;
    for &(_, _, loc, _) in &locations {
        defs.write_empty(loc)?;
    }
    check(defs.close(), "closing the definition files")?;

    for (child, parent) in parents {
        comm_defs.set_parent(child, parent);
    }
    write_definitions(
        &archive,
        Definitions {
            world_size: trace.world_size,
            metas: &metas,
            region_names: &region_names,
            locations: &locations,
            comm_defs: &comm_defs,
            io_handles: &io_handles,
            any_io,
            time_range: (wr.min_ts, wr.max_ts),
        },
    )?;
    wr.summary.locations = locations.len() as u64;
    let summary = std::mem::take(&mut wr.summary);
    drop(wr);
    check(archive.close(), "closing the archive")?;
    progress(total, total);
    Ok(summary)
}

/// A suspension as a measurement-off interval, with a `BufferFlush` over its write when the rank
/// flushed in it. `(ga, gb)`: its times on the global clock.
fn write_suspension(
    wr: &mut Writer,
    lane: &mut Lane,
    s: &Suspension,
    (ga, gb): (u64, u64),
    window: &Window,
) -> Result<(), ExportError> {
    if !window.overlaps(ga, gb) {
        wr.summary.cut += 1;
        return Ok(());
    }
    let (ga, gb) = window.clip(ga, gb);
    let w = &lane.writer;
    let a = wr.ts(&mut lane.written, ga);
    let code = w.measurement_on_off(a, ffi::OTF2_MEASUREMENT_OFF);
    wr.done(&mut lane.written, code, "MeasurementOnOff")?;
    if s.flushed && s.write_ns > 0 {
        // The write comes first in a flushing suspension; Score-P marks its own flushes the same
        // way, so Scalasca-family tools know the interval.
        let stop = wr.ts(
            &mut lane.written,
            ga.saturating_add(s.write_ns).min(window.to),
        );
        let code = w.buffer_flush(a, stop);
        wr.done(&mut lane.written, code, "BufferFlush")?;
        wr.summary.buffer_flushes += 1;
    }
    let b = wr.ts(&mut lane.written, gb);
    let code = w.measurement_on_off(b, ffi::OTF2_MEASUREMENT_ON);
    let result = wr.done(&mut lane.written, code, "MeasurementOnOff");
    wr.summary.suspensions += 1;
    result
}
