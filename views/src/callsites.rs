//! Where the program calls MPI: time and bytes per call site (`evenflush report --callsites`),
//! as mpiP reports them, from traces recorded with `--callsites`.
//!
//! A call site is a return address recorded once per rank in a `CallSite` definition, with the
//! file it lies in and that file's load address. Sites of different ranks are the same place when
//! they have the same file and the same offset in it, so the table sums over ranks. The offset is
//! resolved to function, source file and line from the file's DWARF (or, without debug
//! information, its symbol table) at report time: the program must still be at the path it was
//! run from.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use format::{Event, NO_SITE};

use trace::Skipped;
use trace::Trace;
use trace::TraceError;
use trace::clock::MapCursor;
use trace::clock::TimeMap;
use trace::definitions::RankMeta;
use trace::open::for_each_event;
use trace::window::Window;

/// One place in one file that calls one MPI function.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SiteKey {
    pub function: String,
    pub file: String,
    /// The return address relative to where `file` was loaded.
    pub offset: u64,
}

/// What the calls from one site cost, summed over ranks.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SiteStats {
    pub calls: u64,
    pub ranks: u32,
    /// Time inside the MPI calls, ns.
    pub time_ns: f64,
    pub bytes: u64,
    pub recv_bytes: u64,
}

/// A call site resolved to source, where the file could be read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Source {
    /// The function that makes the call.
    pub caller: Option<String>,
    /// `file:line` of the call.
    pub line: Option<String>,
}

#[derive(Clone, Debug, Default)]
pub struct CallSiteReport {
    /// Heaviest first (time, then calls).
    pub sites: Vec<(SiteKey, SiteStats, Source)>,
    /// Calls whose site was not recorded (the trace was recorded without `--callsites`, or the
    /// call is one the recorder makes no site for: `MPI_Init`, `MPI_Finalize`, folded polls).
    pub calls_without_site: u64,
    pub calls_with_site: u64,
    pub skipped: Vec<Skipped>,
}

/// Reads every rank and sums the calls per call site. With a window (and the trace's first pass,
/// [`trace::scan::scan`], it was resolved on), only its ranks and the calls whose start lies in
/// it count, as in `evenflush report`.
pub fn call_sites(
    trace: &Trace,
    window: Option<(&Window, &[RankMeta])>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<CallSiteReport, TraceError> {
    let mut sites: HashMap<SiteKey, SiteStats> = HashMap::new();
    let mut report = CallSiteReport::default();
    let mut done = 0u64;
    for files in &trace.ranks {
        // The window's test for a call of this rank: its start on the global clock.
        let mut inside = match window {
            None => None,
            Some((w, _)) if !w.has_rank(files.rank) => continue,
            Some((w, metas)) => {
                let Some(meta) = metas.iter().find(|m| m.rank == files.rank) else {
                    continue;
                };
                Some((w, TimeMap::new(meta), HashMap::<u32, MapCursor>::new()))
            }
        };
        let first = files.parts[0].open()?;
        let ns_per_tick = trace::clock::ns_per_tick(&first.header().clock);
        drop(first);
        let mut names: HashMap<u16, String> = HashMap::new();
        // The rank's sites: id -> (file, offset); the calls are summed per (function, id) first,
        // since a definition may come after a call in another thread's stream.
        let mut defs: HashMap<u32, (String, u64)> = HashMap::new();
        let mut per_id: HashMap<(u16, u32), SiteStats> = HashMap::new();
        let (_, skipped) = for_each_event(
            files,
            |chunk| {
                done += chunk.events;
                progress(done, 0);
            },
            |stream, e| match e {
                Event::FunctionDef { id, name } => {
                    names.insert(*id, name.clone());
                }
                Event::CallSite(s) => {
                    defs.insert(s.id, (s.file.clone(), s.address.wrapping_sub(s.base)));
                }
                Event::Call(format::MpiCall { start, .. })
                | Event::Polls(format::PollRun { start, .. })
                    if inside.as_mut().is_some_and(|(w, map, cursors)| {
                        let cur = cursors.entry(stream).or_default();
                        !w.contains(map.absolute(map.global_ns(*start, cur)))
                    }) => {}
                Event::Call(c) if c.site == NO_SITE => report.calls_without_site += 1,
                Event::Call(c) => {
                    report.calls_with_site += 1;
                    let st = per_id.entry((c.func, c.site)).or_default();
                    st.calls += 1;
                    st.time_ns += c.end.saturating_sub(c.start) as f64 * ns_per_tick;
                    st.bytes += c.bytes;
                    st.recv_bytes += c.recv_bytes;
                }
                Event::Polls(p) => report.calls_without_site += p.count,
                _ => {}
            },
        )?;
        report.skipped.extend(skipped);
        for ((func, id), st) in per_id {
            let (file, offset) = defs
                .get(&id)
                .cloned()
                .unwrap_or_else(|| (format!("(site #{id} undefined)"), 0));
            let key = SiteKey {
                function: names
                    .get(&func)
                    .cloned()
                    .unwrap_or_else(|| format!("function#{func}")),
                file,
                offset,
            };
            let total = sites.entry(key).or_default();
            total.calls += st.calls;
            total.ranks += 1;
            total.time_ns += st.time_ns;
            total.bytes += st.bytes;
            total.recv_bytes += st.recv_bytes;
        }
    }
    let mut resolver = Resolver::default();
    report.sites = sites
        .into_iter()
        .map(|(k, st)| {
            let src = resolver.resolve(&k.file, k.offset);
            (k, st, src)
        })
        .collect();
    report.sites.sort_by(|a, b| {
        b.1.time_ns
            .total_cmp(&a.1.time_ns)
            .then(b.1.calls.cmp(&a.1.calls))
            .then(a.0.cmp(&b.0))
    });
    Ok(report)
}

/// One loaded file per path, kept for every site in it (loading parses its DWARF).
#[derive(Default)]
struct Resolver {
    loaders: BTreeMap<String, Option<addr2line::Loader>>,
}

impl Resolver {
    fn resolve(&mut self, file: &str, offset: u64) -> Source {
        let loader = self
            .loaders
            .entry(file.to_string())
            .or_insert_with(|| {
                if file.is_empty() || !Path::new(file).is_file() {
                    return None;
                }
                addr2line::Loader::new(file).ok()
            })
            .as_ref();
        let Some(loader) = loader else {
            return Source::default();
        };
        // The return address is the instruction after the call; one byte back lies inside the
        // call instruction, on the caller's line. Addresses in the file are relative to its
        // lowest segment (0 for position-independent code).
        let probe = offset.saturating_sub(1) + loader.relative_address_base();
        let line = loader.find_location(probe).ok().flatten().and_then(|l| {
            let file = l.file?;
            Some(match l.line {
                Some(n) => format!("{file}:{n}"),
                None => file.to_string(),
            })
        });
        // Frames come innermost first: the function whose source holds the call, even when the
        // compiler inlined it into another.
        let caller = loader
            .find_frames(probe)
            .ok()
            .and_then(|mut frames| {
                let mut innermost = None;
                while let Ok(Some(f)) = frames.next() {
                    if let Some(name) = f.function.as_ref().and_then(|n| n.demangle().ok()) {
                        innermost.get_or_insert(name.into_owned());
                    }
                }
                innermost
            })
            .or_else(|| {
                // No debug information (a distribution's stripped build): the symbol table still
                // names the function.
                let symbol = loader.find_symbol(probe)?;
                Some(addr2line::demangle_auto(symbol.into(), None).into_owned())
            });
        Source { caller, line }
    }
}

impl CallSiteReport {
    /// The table `evenflush report --callsites` prints.
    pub fn render_table(&self, limit: usize) -> String {
        use std::fmt::Write as _;
        let mut o = String::new();
        let total: u64 = self.calls_with_site + self.calls_without_site;
        let _ = writeln!(
            o,
            "\nCall sites: {} sites, {} of {} MPI calls with a recorded site",
            self.sites.len(),
            self.calls_with_site,
            total
        );
        if self.calls_with_site == 0 {
            let _ = writeln!(
                o,
                "  (no call sites in this trace: record with `evenflush run --callsites`)"
            );
            return o;
        }
        let _ = writeln!(
            o,
            "{:<24} {:>10} {:>6} {:>12} {:>14} {:>14}  where",
            "function", "calls", "ranks", "time s", "bytes", "received"
        );
        for (k, st, src) in self.sites.iter().take(limit) {
            let place = match (&src.line, &src.caller) {
                (Some(l), Some(c)) => format!("{l} ({c})"),
                (Some(l), None) => l.clone(),
                (None, Some(c)) => format!("{c} in {} +{:#x}", short(&k.file), k.offset),
                (None, None) => format!("{} +{:#x}", short(&k.file), k.offset),
            };
            let _ = writeln!(
                o,
                "{:<24} {:>10} {:>6} {:>12.6} {:>14} {:>14}  {place}",
                k.function,
                st.calls,
                st.ranks,
                st.time_ns / 1e9,
                st.bytes,
                st.recv_bytes
            );
        }
        if self.sites.len() > limit {
            let _ = writeln!(
                o,
                "  ... {} more (--json lists all)",
                self.sites.len() - limit
            );
        }
        o
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "calls_with_site": self.calls_with_site,
            "calls_without_site": self.calls_without_site,
            "sites": self.sites.iter().map(|(k, st, src)| serde_json::json!({
                "function": k.function,
                "file": k.file,
                "offset": k.offset,
                "line": src.line,
                "caller": src.caller,
                "calls": st.calls,
                "ranks": st.ranks,
                "time_s": st.time_ns / 1e9,
                "bytes": st.bytes,
                "recv_bytes": st.recv_bytes,
            })).collect::<Vec<_>>(),
        })
    }
}

fn short(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}
