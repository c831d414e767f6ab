//! The time mapping of one lane: every timestamp from the rank's ticks to the output clock (global
//! nanoseconds), with the suspensions (DP') collapsed and the recorder's cost (DP) taken out as
//! asked. Independent per lane, so lanes are mapped on any core.

use format::{Event, Marker};

use trace::clock::{MapCursor, TimeMap, round};

/// Where a lane's `MPI_Init` end or `MPI_Finalize` start lies, in each clock a span is quoted in.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Mark {
    pub global: f64,
    pub collapsed: f64,
    pub dp_ns: f64,
    /// Of `dp_ns`, the cost between the polls of folded poll runs: real recorder work, but
    /// unlike a call's cost it can exceed a few per cent of a span without the rank having been
    /// descheduled (a loop of cheap polls costs the recorder about what the polls cost).
    pub polls_dp_ns: f64,
    /// Of `dp_ns`, the clock reads (see [`LaneMapper::reads_ns`]).
    pub reads_ns: f64,
    /// The marker's time as mapped, before any repair, and how far the repair moved it.
    pub mapped: u64,
    pub shift_ns: f64,
}

/// The first `InitDone`, `FinalizeStart` and `AbnormalEnd` of a lane, each as a `T`: the
/// mapping's [`Mark`]s ([`LaneMarks`]), or the times an engine that moves lanes (the repair, the
/// replay) handed the markers out at ([`SpanSeen`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SpanMarks<T> {
    pub init: Option<T>,
    pub finalize: Option<T>,
    pub abnormal: Option<T>,
}

pub(crate) type LaneMarks = SpanMarks<Mark>;
pub(crate) type SpanSeen = SpanMarks<u64>;

impl<T> Default for SpanMarks<T> {
    fn default() -> Self {
        SpanMarks {
            init: None,
            finalize: None,
            abnormal: None,
        }
    }
}

/// The time of `e` if it is one of the span's markers ([`SpanMarks`]).
fn span_marker_time(e: &Event) -> Option<u64> {
    match e {
        Event::Marker(
            Marker::InitDone { time }
            | Marker::FinalizeStart { time }
            | Marker::AbnormalEnd { time, .. },
        ) => Some(*time),
        _ => None,
    }
}

impl<T: Copy> SpanMarks<T> {
    /// Keeps `value` for `e`, a span marker, if it is the first of its kind.
    fn keep(&mut self, e: &Event, value: T) {
        let slot = match e {
            Event::Marker(Marker::InitDone { .. }) => &mut self.init,
            Event::Marker(Marker::FinalizeStart { .. }) => &mut self.finalize,
            Event::Marker(Marker::AbnormalEnd { .. }) => &mut self.abnormal,
            _ => return,
        };
        slot.get_or_insert(value);
    }

    /// Where the lane's span ends (`trace::span::end_of`).
    pub fn end(&self) -> Option<T> {
        trace::span::end_of(self.finalize, self.abnormal)
    }
}

impl SpanSeen {
    /// Takes `e`'s time if it is the first span marker of its kind.
    pub fn see(&mut self, e: &Event) {
        if let Some(time) = span_marker_time(e) {
            self.keep(e, time);
        }
    }

    /// Sets each mark's shift: how far the engine moved it from where the mapping put it.
    pub fn shift(&self, marks: &mut LaneMarks) {
        for (mark, seen) in [
            (&mut marks.init, self.init),
            (&mut marks.finalize, self.finalize),
            (&mut marks.abnormal, self.abnormal),
        ] {
            if let (Some(mark), Some(t)) = (mark.as_mut(), seen) {
                mark.shift_ns = t as f64 - mark.mapped as f64;
            }
        }
    }
}

/// Maps one lane's events in place, in order.
///
/// The recorder's cost of a call (or poll run) is spent right after the call's end, before the
/// program goes on (but for the one clock read a call's own record holds, which comes off the
/// call), so it is removed from the wall time that follows the end, at the rate that
/// time passes, and never more than the time that passed before the lane's next call: removing
/// more would move the next call before the end of this one. What does not fit (a rank
/// descheduled while the recorder sampled its cost, or slow-path time measured before this call
/// and charged to it) is removed from the gaps that follow, as they come.
pub(crate) struct LaneMapper<'a> {
    map: &'a TimeMap,
    cur: MapCursor,
    remove_dp_prime: bool,
    remove_dp: bool,
    /// The recorder's cost spent on this lane up to the last call's end, ns.
    dp_ns: f64,
    /// Of `dp_ns`, what was spent between the polls of folded runs, ns.
    polls_dp_ns: f64,
    /// What a call's two clock reads (the record's start and end) cost the program, ns; 0 when
    /// the trace does not say.
    read_pair_ns: f64,
    /// Of the cost charged so far, the clock reads: two per call and per poll, never more than
    /// what the call (or run) was charged. A program whose own work between calls is a long
    /// dependent chain runs the reads beside it and did not save them untraced
    /// (`benches/recorder_cost/hidden_reads.c`), so its T(G) comes out low by up to this much
    /// (paper-notes/fidelity.md).
    reads_ns: f64,
    /// Cost charged so far and not yet removed, ns, to be removed from the wall time after
    /// `last_end`, the last call's end in the clock before DP is removed.
    pending_ns: f64,
    last_end: f64,
    pub marks: LaneMarks,
    /// Time the mapping removed at the start of the last call mapped (ns): its recorded start in
    /// the global clock is the mapped start plus this, and its mapped end plus this is its
    /// recorded end without the clock read the call's record holds. This lets the matcher also
    /// judge the times as recorded, and the replay measure what a wait spent after its partner
    /// was there without the recorder.
    pub removed: u64,
}

impl<'a> LaneMapper<'a> {
    /// `read_ticks`: one clock read's cost in the rank's ticks, 0 if not recorded.
    pub fn new(map: &'a TimeMap, remove_dp_prime: bool, remove_dp: bool, read_ticks: u16) -> Self {
        LaneMapper {
            map,
            cur: MapCursor::default(),
            remove_dp_prime,
            remove_dp,
            dp_ns: 0.0,
            polls_dp_ns: 0.0,
            // At the map's rate, as the costs are: the host's shared calibration, which a rank's
            // own can differ from in the last digits.
            read_pair_ns: 2.0 * f64::from(read_ticks) * map.ns_per_tick(),
            reads_ns: 0.0,
            pending_ns: 0.0,
            last_end: 0.0,
            marks: LaneMarks::default(),
            removed: 0,
        }
    }

    /// A time in the output clock before DP is removed: global, with DP' collapsed if asked.
    fn before_dp(&mut self, t: u64) -> f64 {
        if self.remove_dp_prime {
            self.map.collapsed_ns(t, &mut self.cur)
        } else {
            self.map.global_ns(t, &mut self.cur)
        }
    }

    /// The recorder's cost spent by `at` (in the clock of [`Self::before_dp`]).
    fn dp_at(&self, at: f64) -> f64 {
        self.dp_ns + self.pending_ns.min((at - self.last_end).max(0.0))
    }

    /// Starts a call or poll run at `at`: what the gap before it held of the pending cost is
    /// removed; the rest waits for the next gap.
    fn settle_cost(&mut self, at: f64) {
        let spent = self.pending_ns.min((at - self.last_end).max(0.0));
        self.dp_ns += spent;
        self.pending_ns -= spent;
    }

    /// Ends a call or poll run: `removed` for the matcher (with `removed_dp`, the DP removed
    /// before the call, or at the run's end), and the cost left for the gap after it (ns), added
    /// to what is pending from `end` on.
    fn after_end(&mut self, raw_end: u64, end: f64, removed_dp: f64, cost_ns: f64) {
        if self.remove_dp_prime || self.remove_dp {
            let g = self.map.global_ns(raw_end, &mut self.cur);
            self.removed = round((g - end + removed_dp).max(0.0)) as u64;
        }
        self.pending_ns += cost_ns;
        self.last_end = end;
    }

    #[inline]
    pub fn map_event(&mut self, e: &mut Event) {
        let npt = self.map.ns_per_tick();
        let map = self.map;
        let removable = |dp: f64, remove_dp: bool| if remove_dp { dp } else { 0.0 };
        // Calls and completions are nearly every event: handled here without the generic walk.
        match e {
            Event::Call(c) => {
                let raw_end = c.end;
                let start = self.before_dp(c.start);
                self.settle_cost(start);
                let end = self.before_dp(raw_end);
                let cost_ns = f64::from(c.cost) * npt;
                // Of the call's two clock reads, one runs between the two instants they return
                // (the first read's tail and the second's head), so the recorded call is one read
                // longer than the program's: that part of the cost leaves the call itself. The
                // gap after the call holds the rest (the recorder's work and the other read);
                // taking the whole cost from that gap overdrew it on dense calls (3 M
                // `MPI_Comm_rank` in a row left 21 ms to come out of the program's next sleeps).
                let inside = (self.read_pair_ns / 2.0)
                    .min(cost_ns)
                    .min(end - start)
                    .max(0.0);
                let dp_at_start = removable(self.dp_ns, self.remove_dp);
                self.dp_ns += inside;
                let dp = removable(self.dp_ns, self.remove_dp);
                c.start = map.absolute(start - dp_at_start);
                c.end = map.absolute(end - dp).max(c.start);
                self.after_end(raw_end, end, dp_at_start, cost_ns - inside);
                self.reads_ns += cost_ns.min(self.read_pair_ns);
                c.cost = if self.remove_dp {
                    0
                } else {
                    round(cost_ns) as u32
                };
                return;
            }
            Event::Completion(_) => return,
            Event::Polls(p) => {
                // The recorder's cost between the polls (`inner_cost`) is removed from the run,
                // from the time it spent outside MPI, where that cost was spent. A loop the
                // program leaves on its own, after its work between the polls, ended that much
                // later: hpcc's `Testany` loops, which keeping the cost left ~+30 % slow
                // (paper-notes/fidelity.md). A loop that waited for a late partner does not end
                // earlier in the replay, which ends its wait when the partner's message is there;
                // rank by rank (`subtract`) such a loop can end before it.
                let start = self.before_dp(p.start);
                self.settle_cost(start);
                let end = self.before_dp(p.end).max(start);
                let dp_at_start = removable(self.dp_ns, self.remove_dp);
                // Counted in DP whether or not the times lose it, as every call's cost is.
                let outside_mpi = (end - start - p.busy as f64 * npt).max(0.0);
                let inner = (p.inner_cost as f64 * npt).min(outside_mpi);
                self.dp_ns += inner;
                self.polls_dp_ns += inner;
                let dp = removable(self.dp_ns, self.remove_dp);
                let raw_end = p.end;
                p.start = map.absolute(start - dp_at_start);
                p.end = map.absolute(end - dp).max(p.start);
                // As for a call, at the run's end: the replay needs the recorder's cost spent
                // after the last poll (up to the call that ends the loop).
                self.after_end(raw_end, end, dp, f64::from(p.cost) * npt);
                self.reads_ns +=
                    (inner + f64::from(p.cost) * npt).min(p.count as f64 * self.read_pair_ns);
                p.busy = round(p.busy as f64 * npt) as u64;
                p.inner_cost = if self.remove_dp {
                    0
                } else {
                    round(p.inner_cost as f64 * npt) as u64
                };
                p.cost = if self.remove_dp {
                    0
                } else {
                    round(f64::from(p.cost) * npt) as u32
                };
                return;
            }
            _ => {}
        }
        if let Some(time) = span_marker_time(e) {
            let at = self.before_dp(time);
            let dp_ns = self.dp_at(at);
            let mark = Mark {
                global: map.global_ns(time, &mut self.cur),
                collapsed: map.collapsed_ns(time, &mut self.cur),
                dp_ns,
                polls_dp_ns: self.polls_dp_ns,
                reads_ns: self.reads_ns,
                mapped: map.absolute(at - removable(dp_ns, self.remove_dp)),
                shift_ns: 0.0,
            };
            self.marks.keep(e, mark);
        }
        trace::times::for_each_time(e, |t| {
            let at = self.before_dp(*t);
            *t = map.absolute(at - removable(self.dp_at(at), self.remove_dp));
        });
        if let Event::Clock(s) = e {
            s.offset_ns = 0.0;
        }
    }
}
