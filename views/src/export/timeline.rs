//! `evenflush timeline`: a Gantt picture of a run (PNG, plotters).
//!
//! Ranks are rows, time runs left to right in seconds since the earliest end of `MPI_Init`
//! (global clock). MPI calls are painted per pixel column: each column of a rank's row takes the
//! colour of the call kind that covers most of the column's time, and is stronger the more of it
//! MPI covers, so a zoomed-out view stays honest (a column half in MPI is half as strong) and the
//! memory is one small array per rank row whatever the length of the trace. Sends and receives,
//! usually much shorter than a column, also leave a small mark in the top part of the row where
//! they start, so they stay visible next to the long waits. Matched messages are
//! arrows from the send call's start to the end of the call that completed the receive;
//! suspensions are shaded. With `reconstructed`, the suspensions are removed from the time axis
//! (they collapse to thin marks) as `evenflush reconstruct` would.

use std::collections::HashMap;
use std::path::Path;

use format::{Event, Marker};
use plotters::prelude::*;

use super::{CallKind, ExportError, function_table};
use reconstruct::matches::for_each_match;
use trace::Skipped;
use trace::Trace;
use trace::clock::MapCursor;
use trace::clock::TimeMap;
use trace::funcs::FuncClass;
use trace::meta_cache::scan_for;
use trace::open::{ChunkStats, for_each_event};
use trace::window::WindowSpec;
use trace::window::{Ends, for_each_event_in};

/// Where the picture's font comes from (Debian package fonts-dejavu-core).
pub const FONT_PATH: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

#[derive(Clone, Debug)]
pub struct TimelineOptions {
    /// The window drawn (`trace::window`); ranks are drawn in the order given. Without a time
    /// range: the earliest end of `MPI_Init` to the latest start of `MPI_Finalize`.
    pub window: WindowSpec,
    /// Remove the suspensions from the time axis.
    pub reconstructed: bool,
    pub width: u32,
    /// Most arrows drawn; beyond it, every k-th message is drawn (and the legend says so).
    /// 0 = one per 4 pixels of plot width, which keeps a zoomed-out picture from turning black.
    pub max_arrows: usize,
}

impl Default for TimelineOptions {
    fn default() -> Self {
        TimelineOptions {
            window: WindowSpec::default(),
            reconstructed: false,
            width: 1600,
            max_arrows: 0,
        }
    }
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct TimelineSummary {
    pub width: u32,
    pub height: u32,
    pub from_s: f64,
    pub to_s: f64,
    pub ranks: Vec<u32>,
    pub calls_in_window: u64,
    pub arrows_drawn: u64,
    pub messages_in_window: u64,
    /// Matched messages with one end in the window and the other outside it (in time or rank).
    pub messages_crossing: u64,
    /// Of those, drawn as an arrow to a mark at the picture's edge (or at the row of the rank
    /// outside the subset).
    pub edge_arrows_drawn: u64,
    /// What the window was (`Window`'s description).
    pub window: String,
    pub suspensions_in_window: u64,
    /// Memory samples drawn (the resident set and the recorder's bytes of each row, as lines).
    pub memory_samples_in_window: u64,
    /// `MemoryLow` markers drawn (the node had less memory than the rank's next flush needed).
    pub memory_low_in_window: u64,
    pub skipped: Vec<Skipped>,
}

fn color(kind: CallKind) -> RGBColor {
    match kind {
        CallKind::Send => RGBColor(238, 134, 28),
        CallKind::Recv => RGBColor(45, 112, 200),
        CallKind::Wait => RGBColor(214, 48, 49),
        CallKind::Collective => RGBColor(46, 158, 82),
        CallKind::Other => RGBColor(140, 140, 140),
    }
}

fn kind_slot(kind: CallKind) -> usize {
    CallKind::ALL.iter().position(|k| *k == kind).unwrap_or(4)
}

/// Registers the font as plotters' `sans-serif` family, once per process (the other PNG writers
/// of the command line use it too, so that one font file and one error message serve them all).
pub fn register_font() -> Result<(), ExportError> {
    use std::sync::OnceLock;
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let bytes = std::fs::read(FONT_PATH).map_err(|e| {
                format!("{FONT_PATH}: {e} (the timeline needs a font: install fonts-dejavu-core)")
            })?;
            // plotters keeps registered fonts for the life of the process.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                .map_err(|_| format!("{FONT_PATH} is not a usable font"))
        })
        .clone()
        .map_err(ExportError::Other)
}

fn draw_err<E: std::fmt::Debug>(e: E) -> ExportError {
    ExportError::Other(format!("drawing the timeline: {e:?}"))
}

/// Draws the timeline of `trace` into the PNG `out`.
pub fn render(
    trace: &Trace,
    out: &Path,
    opts: &TimelineOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<TimelineSummary, ExportError> {
    // The image library takes the format from the name, and says so only after the whole trace
    // was read, as a debug dump ("Unsupported(UnsupportedError { format: Unknown ...").
    if !out
        .extension()
        .is_some_and(|x| x.eq_ignore_ascii_case("png"))
    {
        return Err(ExportError::Other(format!(
            "{}: the picture is a PNG, and its file name must end in .png",
            out.display()
        )));
    }
    register_font()?;
    let metas = scan_for(trace, !opts.window.is_everything())?;
    let maps: Vec<TimeMap> = metas.iter().map(TimeMap::new).collect();
    let to_axis = |map: &TimeMap, t: u64, cur: &mut MapCursor| -> f64 {
        if opts.reconstructed {
            map.collapsed_ns(t, cur)
        } else {
            map.global_ns(t, cur)
        }
    };
    let mut init = f64::INFINITY;
    let mut fin = f64::NEG_INFINITY;
    for (meta, map) in metas.iter().zip(&maps) {
        let mut cur = MapCursor::default();
        if let Some(t) = meta.init_done {
            init = init.min(to_axis(map, t, &mut cur));
        }
        if let Some(t) = meta.span_end() {
            fin = fin.max(to_axis(map, t, &mut cur));
        }
    }
    if !init.is_finite() || !fin.is_finite() || fin <= init {
        return Err(ExportError::Other(
            "the trace has no MPI_Init/MPI_Finalize markers to place the time axis".into(),
        ));
    }
    let origin = init;
    let mut window = opts
        .window
        .resolve_on(&metas, trace.world_size, |map, t, cur| to_axis(map, t, cur))
        .map_err(|e| ExportError::Other(e.to_string()))?;
    let epoch = maps.first().map_or(0, TimeMap::epoch_ns);
    // The picture needs ends: without a time range it shows the span.
    if window.cuts_nothing_in_time() {
        window.from = maps[0].absolute(init);
        window.to = maps[0].absolute(fin);
    }
    let from_s = (window.from as f64 - epoch as f64 - origin) / 1e9;
    let to_s = if window.to == u64::MAX {
        (fin - origin) / 1e9
    } else {
        (window.to as f64 - epoch as f64 - origin) / 1e9
    };
    if to_s <= from_s {
        return Err(ExportError::Other(format!(
            "empty window: --from {from_s} is not before --to {to_s}"
        )));
    }
    let rows: Vec<u32> = window.ranks();
    let row_of: HashMap<u32, usize> = rows.iter().enumerate().map(|(i, r)| (*r, i)).collect();

    let width = opts.width.max(400);
    let row_px = if rows.len() <= 16 {
        56
    } else {
        (900 / rows.len() as u32).max(6)
    };
    let height = 150 + row_px * rows.len() as u32;
    let root = BitMapBackend::new(out, (width, height)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_err)?;
    let (main, legend_area) = root.split_vertically(height - 40);
    let n = rows.len() as f64;
    let title = format!(
        "{} — {} ranks, {:.6}–{:.6} s{}",
        trace.dir.file_name().map_or_else(
            || trace.dir.display().to_string(),
            |n| n.to_string_lossy().to_string()
        ),
        trace.world_size,
        from_s,
        to_s,
        if opts.reconstructed {
            " (suspensions removed)"
        } else {
            ""
        }
    );
    let mut chart = ChartBuilder::on(&main)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .margin_right(36)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(from_s..to_s, n..0.0)
        .map_err(draw_err)?;
    let rows_for_labels = rows.clone();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_desc("seconds since the end of MPI_Init (global clock)")
        .y_labels(rows.len() * 2 + 1)
        .y_label_formatter(&|y: &f64| {
            // Labels sit at the middle of each row.
            let i = y.floor() as usize;
            if (y - y.floor() - 0.5).abs() < 1e-9 && i < rows_for_labels.len() {
                format!("rank {}", rows_for_labels[i])
            } else {
                String::new()
            }
        })
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 16))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(draw_err)?;
    let (plot_w, _) = chart.plotting_area().dim_in_pixel();
    let cols = plot_w.max(1) as usize;
    let window_ns = (to_s - from_s) * 1e9;
    let col_ns = window_ns / cols as f64;
    let lo_ns = origin + from_s * 1e9;
    let hi_ns = origin + to_s * 1e9;

    // Per row and pixel column: nanoseconds covered by each call kind.
    let mut cover = vec![vec![[0f32; 5]; cols]; rows.len()];
    // Per row and column: whether a send (bit 0) or a receive (bit 1) call starts there. Such calls
    // are often far shorter than a column and lose it to the wait beside them; marks keep them seen.
    let mut p2p = vec![vec![0u8; cols]; rows.len()];
    let mut suspensions: Vec<(usize, f64, f64)> = Vec::new();
    // Per row: (seconds, resident set, recorder bytes) of every memory sample in the window.
    let mut memory: Vec<Vec<(f64, u64, u64)>> = vec![Vec::new(); rows.len()];
    // Per `MemoryLow` marker: (row, seconds).
    let mut memory_low: Vec<(usize, f64)> = Vec::new();
    let max_arrows = if opts.max_arrows == 0 {
        (cols / 4).max(50)
    } else {
        opts.max_arrows
    };
    // Arrows are sampled as the messages are matched, so that no list of every message is kept.
    let mut arrows = ArrowSample::new(max_arrows);
    // Messages crossing the window's edge, drawn to a mark where their other end would be.
    let mut crossing = ArrowSample::new(max_arrows);
    for_each_match(
        trace,
        &metas,
        &maps,
        |map, t, cur| map.absolute(to_axis(map, t, cur)),
        |_, _| {},
        |m| {
            // The send call's start and the end of the call that completed the receive.
            let a = m.send_start as f64 - epoch as f64;
            let b = m.recv_end as f64 - epoch as f64;
            match window.ends(m.source, m.send_start, m.dest, m.recv_end) {
                Ends::Both => arrows.offer((m.source, m.dest, a, b)),
                Ends::SendOnly | Ends::RecvOnly => crossing.offer((m.source, m.dest, a, b)),
                // A message passing over a drawn window between drawn rows still shows.
                Ends::Neither
                    if row_of.contains_key(&m.source)
                        && row_of.contains_key(&m.dest)
                        && a.min(b) <= hi_ns
                        && a.max(b) >= lo_ns =>
                {
                    arrows.offer((m.source, m.dest, a, b))
                }
                Ends::Neither => {}
            }
        },
    )?;
    let mut summary = TimelineSummary {
        width,
        height,
        from_s,
        to_s,
        ranks: rows.clone(),
        window: window.describe(),
        ..Default::default()
    };
    let total: u64 = rows
        .iter()
        .filter_map(|r| metas.iter().find(|m| m.rank == *r))
        .map(|m| m.events)
        .sum();
    let mut done = 0u64;
    // The picture's range on the global axis, a microsecond wider than drawn so that rounding
    // between it and the axis never leaves out a chunk.
    let chunks_wanted = {
        let mut w = window.clone();
        w.from = w.from.saturating_sub(1_000);
        w.to = w.to.saturating_add(1_000);
        w
    };
    for (files, (meta, map)) in trace.ranks.iter().zip(metas.iter().zip(&maps)) {
        let Some(&row) = row_of.get(&files.rank) else {
            continue;
        };
        let funcs = function_table(meta);
        let mut cursors: HashMap<u32, MapCursor> = HashMap::new();
        let on_chunk = |chunk: &ChunkStats| {
            done += chunk.events;
            progress(done, total);
        };
        let on_event = |stream, e: &Event| {
            let mut one = |stream, e: &Event| {
                let cur = cursors.entry(stream).or_default();
                match e {
                    Event::Call(c) => {
                        let a = to_axis(map, c.start, cur);
                        let b = to_axis(map, c.end, cur).max(a);
                        if b < lo_ns || a > hi_ns {
                            return;
                        }
                        summary.calls_in_window += 1;
                        let class = funcs.get(&c.func).map_or(FuncClass::Other, |f| f.1);
                        let kind = CallKind::of(class);
                        let slot = kind_slot(kind);
                        let (a, b) = (a.max(lo_ns) - lo_ns, b.min(hi_ns) - lo_ns);
                        let first = ((a / col_ns) as usize).min(cols - 1);
                        let last = ((b / col_ns) as usize).min(cols - 1);
                        match kind {
                            CallKind::Send => p2p[row][first] |= 1,
                            CallKind::Recv => p2p[row][first] |= 2,
                            _ => {}
                        }
                        for (k, col) in cover[row][first..=last].iter_mut().enumerate() {
                            let c0 = (first + k) as f64 * col_ns;
                            let overlap = (b.min(c0 + col_ns) - a.max(c0)).max(0.0);
                            // Dominance goes by time actually covered; a call of zero length
                            // still registers, so that its column is drawn (faintly).
                            col[slot] += overlap.max(1e-3) as f32;
                        }
                    }
                    Event::Suspension(s) => {
                        let a = to_axis(map, s.start, cur);
                        let b = to_axis(map, s.end, cur).max(a);
                        if b >= lo_ns && a <= hi_ns {
                            suspensions.push((row, (a - origin) / 1e9, (b - origin) / 1e9));
                        }
                    }
                    Event::Memory(m) if m.rss_bytes != format::UNKNOWN_BYTES => {
                        let a = to_axis(map, m.time, cur);
                        if a >= lo_ns && a <= hi_ns {
                            // An unknown recorder figure draws as nothing rather than off the row.
                            let recorder = if m.recorder_bytes == format::UNKNOWN_BYTES {
                                0
                            } else {
                                m.recorder_bytes
                            };
                            memory[row].push(((a - origin) / 1e9, m.rss_bytes, recorder));
                        }
                    }
                    Event::Marker(Marker::MemoryLow { time, .. }) => {
                        let a = to_axis(map, *time, cur);
                        if a >= lo_ns && a <= hi_ns {
                            memory_low.push((row, (a - origin) / 1e9));
                        }
                    }
                    Event::Marker(
                        Marker::LocalFlush { time, .. } | Marker::Compressed { time, .. },
                    ) => {
                        let a = to_axis(map, *time, cur);
                        if a >= lo_ns && a <= hi_ns {
                            suspensions.push((row, (a - origin) / 1e9, (a - origin) / 1e9));
                        }
                    }
                    _ => {}
                }
            };
            crate::export::as_drawn(e, |e| one(stream, e));
        };
        // Everything drawn has a time on the axis, so only the chunks that meet the picture's
        // range are read; on the reconstructed axis (suspensions removed) chunk ranges are not
        // placed, so every chunk is.
        let skipped = if opts.reconstructed {
            for_each_event(files, on_chunk, on_event)?.1
        } else {
            for_each_event_in(files, map, &chunks_wanted, on_chunk, on_event)?.skipped
        };
        summary.skipped.extend(skipped);
    }
    summary.suspensions_in_window = suspensions.len() as u64;
    summary.memory_samples_in_window = memory.iter().map(|m| m.len() as u64).sum();
    summary.memory_low_in_window = memory_low.len() as u64;

    let band = 0.36;
    // Suspensions first, so calls and arrows stay visible on top.
    let min_w = (to_s - from_s) / cols as f64 * 2.0;
    chart
        .draw_series(suspensions.iter().map(|&(row, a, b)| {
            let (a, b) = (a.max(from_s), b.min(to_s).max(a.max(from_s) + min_w));
            Rectangle::new(
                [(a, row as f64 + 0.06), (b, row as f64 + 0.94)],
                RGBColor(150, 110, 210).mix(0.35).filled(),
            )
        }))
        .map_err(draw_err)?;
    let mut bars = Vec::new();
    for (row, columns) in cover.iter().enumerate() {
        for (k, col) in columns.iter().enumerate() {
            let total: f32 = col.iter().sum();
            if total <= 0.0 {
                continue;
            }
            let (slot, _) =
                col.iter().enumerate().fold(
                    (0, 0f32),
                    |best, (i, &v)| if v > best.1 { (i, v) } else { best },
                );
            let strength = (f64::from(total) / col_ns).clamp(0.3, 1.0);
            let x0 = from_s + k as f64 * col_ns / 1e9;
            let x1 = x0 + col_ns / 1e9;
            bars.push(Rectangle::new(
                [(x0, row as f64 + 0.5 - band), (x1, row as f64 + 0.5 + band)],
                color(CallKind::ALL[slot]).mix(strength).filled(),
            ));
        }
    }
    chart.draw_series(bars).map_err(draw_err)?;
    let col_s = col_ns / 1e9;
    let mut marks = Vec::new();
    for (row, columns) in p2p.iter().enumerate() {
        // Where calls are so dense that most columns hold a send or receive, marks would only
        // paint the row over; the dominant colours tell the story then.
        if columns.iter().filter(|&&b| b != 0).count() * 3 > cols {
            continue;
        }
        let top = row as f64 + 0.5 - band;
        for (k, &bits) in columns.iter().enumerate() {
            let x0 = from_s + k as f64 * col_s;
            for (bit, kind, y0) in [
                (1u8, CallKind::Send, top),
                (2, CallKind::Recv, top + band * 0.35),
            ] {
                if bits & bit != 0 {
                    marks.push(Rectangle::new(
                        [(x0, y0), (x0 + 3.0 * col_s, y0 + band * 0.35)],
                        color(kind).filled(),
                    ));
                }
            }
        }
    }
    chart.draw_series(marks).map_err(draw_err)?;

    // Memory: per row, the resident set and the recorder's bytes as lines, the row's height
    // standing for the largest resident set drawn (said in the legend).
    let rss_color = RGBColor(0, 120, 60);
    let recorder_color = RGBColor(230, 120, 0);
    let top_rss = memory.iter().flatten().map(|p| p.1).max().unwrap_or(0);
    if top_rss > 0 {
        for (row, points) in memory.iter().enumerate() {
            let y =
                |bytes: u64| row as f64 + 0.94 - 0.88 * (bytes as f64 / top_rss as f64).min(1.0);
            for (value, c) in [(1usize, rss_color), (2, recorder_color)] {
                let line = points
                    .iter()
                    .map(|p| (p.0, y(if value == 1 { p.1 } else { p.2 })));
                chart
                    .draw_series(LineSeries::new(line, c.stroke_width(2)))
                    .map_err(draw_err)?;
            }
        }
    }

    // Memory-low warnings: a bar across the row, wider than a column so that it stays seen.
    let memory_low_color = RGBColor(200, 0, 0);
    chart
        .draw_series(memory_low.iter().map(|&(row, t)| {
            Rectangle::new(
                [(t, row as f64 + 0.02), (t + min_w, row as f64 + 0.98)],
                memory_low_color.filled(),
            )
        }))
        .map_err(draw_err)?;

    // Arrows: messages between drawn rows with some part inside the window.
    summary.messages_in_window = arrows.seen;
    let step = arrows.step;
    let arrow_color = RGBColor(20, 20, 20).mix(if step > 1 { 0.45 } else { 0.7 });
    let mut drawn = 0u64;
    for &(source, dest, send_t, recv_t) in &arrows.kept {
        let y0 = row_of[&source] as f64 + 0.5;
        let y1 = row_of[&dest] as f64 + 0.5;
        let x0 = (send_t - origin) / 1e9;
        let x1 = (recv_t - origin) / 1e9;
        // Only whole arrows: backend_coord extrapolates past the plotting area.
        if x0 < from_s || x1 > to_s {
            continue;
        }
        let p0 = chart.backend_coord(&(x0, y0));
        let p1 = chart.backend_coord(&(x1, y1));
        root.draw(&PathElement::new(vec![p0, p1], arrow_color.stroke_width(1)))
            .map_err(draw_err)?;
        let (dx, dy) = ((p1.0 - p0.0) as f64, (p1.1 - p0.1) as f64);
        let len = (dx * dx + dy * dy).sqrt();
        if len > 4.0 {
            let (ux, uy) = (dx / len, dy / len);
            let head = 7.0;
            let wing = |sign: f64| {
                (
                    (p1.0 as f64 - head * ux - sign * head * 0.45 * uy).round() as i32,
                    (p1.1 as f64 - head * uy + sign * head * 0.45 * ux).round() as i32,
                )
            };
            root.draw(&Polygon::new(
                vec![p1, wing(1.0), wing(-1.0)],
                arrow_color.filled(),
            ))
            .map_err(draw_err)?;
        }
        drawn += 1;
    }
    summary.arrows_drawn = drawn;

    // Crossing messages: from the end inside to a small square where the other end would be,
    // moved onto the picture's edge (outside in time) or, for a rank not drawn, to the top of the
    // inside end's row.
    summary.messages_crossing = crossing.seen;
    let edge_color = RGBColor(200, 40, 140);
    let mut edge_drawn = 0u64;
    for &(source, dest, send_t, recv_t) in &crossing.kept {
        let send_in = window.has_rank(source) && window.contains(maps[0].absolute(send_t));
        let (inside, outside, in_t, out_t) = if send_in {
            (source, dest, send_t, recv_t)
        } else {
            (dest, source, recv_t, send_t)
        };
        let Some(&in_row) = row_of.get(&inside) else {
            continue;
        };
        let x0 = ((in_t - origin) / 1e9).clamp(from_s, to_s);
        let y0 = in_row as f64 + 0.5;
        let x1 = ((out_t - origin) / 1e9).clamp(from_s, to_s);
        let y1 = row_of
            .get(&outside)
            .map_or(in_row as f64 + 0.08, |&r| r as f64 + 0.5);
        let p0 = chart.backend_coord(&(x0, y0));
        let p1 = chart.backend_coord(&(x1, y1));
        root.draw(&PathElement::new(vec![p0, p1], edge_color.stroke_width(1)))
            .map_err(draw_err)?;
        root.draw(&Rectangle::new(
            [(p1.0 - 3, p1.1 - 3), (p1.0 + 3, p1.1 + 3)],
            edge_color.filled(),
        ))
        .map_err(draw_err)?;
        edge_drawn += 1;
    }
    summary.edge_arrows_drawn = edge_drawn;

    // Legend: one line, or two when the memory entries make it wider than the picture.
    let text = ("sans-serif", 16).into_font();
    let mut items: Vec<(String, RGBAColor)> = CallKind::ALL
        .iter()
        .map(|k| (k.label().to_string(), color(*k).to_rgba()))
        .collect();
    items.push((
        "suspension / lone write / compression".into(),
        RGBColor(150, 110, 210).mix(0.35),
    ));
    if top_rss > 0 {
        items.push((
            format!(
                "RSS (row = {:.0} MiB)",
                top_rss as f64 / (1u64 << 20) as f64
            ),
            rss_color.to_rgba(),
        ));
        items.push(("recorder memory".into(), recorder_color.to_rgba()));
    }
    if !memory_low.is_empty() {
        items.push(("memory low".into(), memory_low_color.to_rgba()));
    }
    if edge_drawn > 0 {
        items.push((
            "message to/from outside the window".into(),
            edge_color.to_rgba(),
        ));
    }
    let arrows_label = if step > 1 {
        format!("message (1 in {step} of {} drawn)", arrows.seen)
    } else {
        "message send → receive".to_string()
    };
    let label_width = |label: &str| {
        legend_area
            .estimate_text_size(label, &TextStyle::from(text.clone()))
            .map_or(9 * label.len() as i32, |(w, _)| w as i32)
    };
    let left = 90;
    // The arrow entry draws a 26 px line where the others draw an 18 px box.
    let widths: Vec<i32> = items
        .iter()
        .map(|(label, _)| 34 + label_width(label))
        .chain([42 + label_width(&arrows_label)])
        .collect();
    let one_line = left + widths.iter().sum::<i32>() <= width as i32;
    let mut places = Vec::with_capacity(widths.len());
    let (mut x, mut y) = (left, if one_line { 12 } else { 4 });
    for w in &widths {
        if !one_line && x > left && x + w > width as i32 {
            (x, y) = (left, 22);
        }
        places.push((x, y));
        x += w;
    }
    for ((label, c), &(x, y)) in items.iter().zip(&places) {
        legend_area
            .draw(&Rectangle::new([(x, y), (x + 18, y + 14)], c.filled()))
            .map_err(draw_err)?;
        legend_area
            .draw(&Text::new(label.clone(), (x + 24, y), text.clone()))
            .map_err(draw_err)?;
    }
    let (x, y) = places.last().copied().unwrap_or((left, 12));
    legend_area
        .draw(&PathElement::new(
            vec![(x, y + 7), (x + 26, y + 7)],
            arrow_color.stroke_width(1),
        ))
        .map_err(draw_err)?;
    legend_area
        .draw(&Text::new(arrows_label, (x + 32, y), text.clone()))
        .map_err(draw_err)?;
    root.present().map_err(draw_err)?;
    progress(total, total);
    Ok(summary)
}

/// Every `step`-th of the messages offered, at most `max` of them: when more would be kept, the
/// step doubles and every other one kept goes (they are the multiples of the new step).
struct ArrowSample<T> {
    max: usize,
    step: usize,
    seen: u64,
    kept: Vec<T>,
}

impl<T> ArrowSample<T> {
    fn new(max: usize) -> Self {
        ArrowSample {
            max: max.max(1),
            step: 1,
            seen: 0,
            kept: Vec::new(),
        }
    }

    fn offer(&mut self, item: T) {
        let ordinal = self.seen;
        self.seen += 1;
        if !ordinal.is_multiple_of(self.step as u64) {
            return;
        }
        self.kept.push(item);
        if self.kept.len() > self.max {
            self.step *= 2;
            let mut keep = false;
            self.kept.retain(|_| {
                keep = !keep;
                keep
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ArrowSample;

    #[test]
    fn arrow_sample_keeps_every_step_th_within_the_bound() {
        let mut s = ArrowSample::new(10);
        for i in 0..10u32 {
            s.offer(i);
        }
        assert_eq!((s.step, s.kept.len()), (1, 10));
        for i in 10..1000u32 {
            s.offer(i);
        }
        assert_eq!(s.seen, 1000);
        assert!(s.kept.len() <= 10, "{}", s.kept.len());
        assert!(s.kept.iter().all(|&i| (i as usize).is_multiple_of(s.step)));
        assert_eq!(s.kept.len(), 1000usize.div_ceil(s.step));
    }
}
