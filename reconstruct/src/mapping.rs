//! The time mapping of one lane: every timestamp from the rank's ticks to the output clock (global
//! nanoseconds), with the suspensions (DP') collapsed and the recorder's cost (DP) taken out as
//! asked. Independent per lane, so lanes are mapped on any core.

use format::{Event, Marker};

use trace::clock::{MapCursor, TimeMap};

/// Where a lane's `MPI_Init` end or `MPI_Finalize` start lies, in each clock a span is quoted in.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Mark {
    pub global: f64,
    pub collapsed: f64,
    pub dp_ns: f64,
    /// The marker's time as mapped, before any repair, and how far the repair moved it.
    pub mapped: u64,
    pub shift_ns: f64,
}

/// The first `InitDone` and `FinalizeStart` of a lane.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LaneMarks {
    pub init: Option<Mark>,
    pub finalize: Option<Mark>,
}

/// Maps one lane's events in place, in order.
pub(crate) struct LaneMapper<'a> {
    map: &'a TimeMap,
    cur: MapCursor,
    remove_dp_prime: bool,
    remove_dp: bool,
    /// The recorder's cost spent so far on this lane, ticks.
    dp_ticks: u64,
    pub marks: LaneMarks,
    /// Time the mapping removed at the last call mapped (ns): its recorded time in the global
    /// clock is the mapped time plus this, which lets the matcher also judge the times as
    /// recorded.
    pub removed: u64,
}

impl<'a> LaneMapper<'a> {
    pub fn new(map: &'a TimeMap, remove_dp_prime: bool, remove_dp: bool) -> Self {
        LaneMapper {
            map,
            cur: MapCursor::default(),
            remove_dp_prime,
            remove_dp,
            dp_ticks: 0,
            marks: LaneMarks::default(),
            removed: 0,
        }
    }

    #[inline]
    pub fn map_event(&mut self, e: &mut Event) {
        let npt = self.map.ns_per_tick();
        let (map, cur, collapse) = (self.map, &mut self.cur, self.remove_dp_prime);
        let removed_dp = if self.remove_dp {
            self.dp_ticks as f64 * npt
        } else {
            0.0
        };
        let to_out = |t: u64, cur: &mut MapCursor| {
            let g = if collapse {
                map.collapsed_ns(t, cur)
            } else {
                map.global_ns(t, cur)
            };
            map.absolute(g - removed_dp)
        };
        // Calls and completions are nearly every event: handled here without the generic walk.
        match e {
            Event::Call(c) => {
                if collapse || self.remove_dp {
                    let g = map.global_ns(c.end, cur);
                    let out = if collapse {
                        map.collapsed_ns(c.end, cur)
                    } else {
                        g
                    };
                    self.removed = (g - out + removed_dp).max(0.0).round() as u64;
                }
                c.start = to_out(c.start, cur);
                c.end = to_out(c.end, cur);
                // The cost of an event is spent after its end, so it delays the next events only.
                self.dp_ticks = self.dp_ticks.saturating_add(u64::from(c.cost));
                c.cost = if self.remove_dp {
                    0
                } else {
                    (f64::from(c.cost) * npt).round() as u32
                };
                return;
            }
            Event::Completion(_) => return,
            Event::Polls(p) => {
                // A polling loop ends when what it waits for arrives (a message, a partner's
                // progress), not when it has polled enough: the recorder's cost inside the run
                // (`inner_cost`) did not delay its end, so both ends move by the cost spent
                // before the run, and only the last poll's cost delays what follows.
                if collapse || self.remove_dp {
                    // As for a call, at the run's end: the replay needs the recorder's cost spent
                    // after the last poll (up to the call that ends the loop).
                    let g = map.global_ns(p.end, cur);
                    let out = if collapse {
                        map.collapsed_ns(p.end, cur)
                    } else {
                        g
                    };
                    self.removed = (g - out + removed_dp).max(0.0).round() as u64;
                }
                p.start = to_out(p.start, cur);
                p.end = to_out(p.end, cur).max(p.start);
                self.dp_ticks = self.dp_ticks.saturating_add(u64::from(p.cost));
                p.busy = (p.busy as f64 * npt).round() as u64;
                p.inner_cost = (p.inner_cost as f64 * npt).round() as u64;
                p.cost = if self.remove_dp {
                    0
                } else {
                    (f64::from(p.cost) * npt).round() as u32
                };
                return;
            }
            _ => {}
        }
        let dp_ns = self.dp_ticks as f64 * npt;
        if let Event::Marker(Marker::InitDone { time } | Marker::FinalizeStart { time }) = *e {
            let mark = Mark {
                global: map.global_ns(time, cur),
                collapsed: map.collapsed_ns(time, cur),
                dp_ns,
                mapped: to_out(time, cur),
                shift_ns: 0.0,
            };
            if matches!(e, Event::Marker(Marker::InitDone { .. })) {
                self.marks.init.get_or_insert(mark);
            } else {
                self.marks.finalize.get_or_insert(mark);
            }
        }
        trace::times::for_each_time(e, |t| *t = to_out(*t, cur));
        if let Event::Clock(s) = e {
            s.offset_ns = 0.0;
        }
    }
}
