//! The repair: a forward pass in the spirit of the controlled logical clock. Each lane carries a
//! shift; when a receive (or collective exit) would end before what it depends on (plus the
//! minimum latency), the shift grows just enough, and every later event of the lane moves by it.
//!
//! The shift is amortised at the next wait: a later receive or collective exit ends when its
//! dependencies allow, but never before its recorded end, so a lane that had slack (it waited
//! anyway) gives the correction back there instead of carrying it to the end of the run. Local
//! order and every dependency are kept; only waits change length.

use format::Event;

use super::matcher::Need;
use super::violations::{EntrySummary, entries_known, waited_for};
use super::{Lane, MessageMatch, Shared};

impl Shared<'_> {
    /// Tries to settle the held call's end. Without `force`, waits until everything it depends
    /// on is known (or will never be: its rank has nothing left); with it, goes on with what is
    /// known (the rest is counted unmatched).
    pub(super) fn resolve<I>(
        &mut self,
        lane: &mut Lane<I>,
        force: bool,
        on_match: &mut impl FnMut(&MessageMatch),
    ) -> bool {
        let needs = lane.needs.take().unwrap_or_default();
        if !force {
            let ready = needs.iter().all(|n| match n {
                Need::Msg { key, seq, .. } => {
                    self.sends.contains_key(&(*key, *seq)) || self.absent(key.1)
                }
                Need::Coll(r) => self
                    .colls
                    .get(&r.key)
                    .is_none_or(|inst| entries_known(self, r, inst)),
            });
            if !ready {
                lane.needs = Some(needs);
                return false;
            }
        }
        let Some(Event::Call(call)) = lane.held.first().cloned() else {
            return true;
        };
        let raw_end = call.end;
        let recorded_end = raw_end.saturating_add(lane.held_removed);
        let done = Self::at(lane, lane.held_index);
        let latency = self.repair.min_latency_ns;
        let mut required = 0u64;
        let mut depends = false;
        for need in &needs {
            match need {
                Need::Msg { key, seq, post } => {
                    let Some(send) = self.sends.remove(&(*key, *seq)) else {
                        self.report.unmatched_receives += 1;
                        if self.absent(key.1) {
                            self.report.waits_on_absent_ranks += 1;
                        }
                        continue;
                    };
                    let epoch = key.3 == super::matcher::EPOCH_TAG;
                    let sender = self.ctx.index_of(key.1).unwrap_or(lane.rank_idx);
                    self.count_message(
                        epoch,
                        sender,
                        lane.rank_idx,
                        send.raw_start,
                        send.recorded_start,
                        raw_end,
                        recorded_end,
                    );
                    required = required.max(send.start.saturating_add(latency));
                    depends = true;
                    let recv_end = raw_end
                        .saturating_add(lane.shift)
                        .max(if self.repair.enabled {
                            send.start.saturating_add(latency)
                        } else {
                            0
                        });
                    // An epoch edge moves no message of the program: the views of messages
                    // (partners, exports) do not show it.
                    if epoch {
                        continue;
                    }
                    on_match(&MessageMatch {
                        send: send.at,
                        recv_post: *post,
                        recv_done: done,
                        source: key.1,
                        dest: key.2,
                        tag: key.3,
                        bytes: send.bytes,
                        send_start: send.start,
                        recv_end,
                    });
                }
                Need::Coll(r) => {
                    let Some(mut inst) = self.colls.remove(&r.key) else {
                        continue;
                    };
                    let range = waited_for(r, inst.starts.len());
                    let slot = inst.summary_slot(&range);
                    if let Some(slot) = slot
                        && inst.summaries[slot].is_none()
                    {
                        if inst.starts[range.clone()].iter().any(Option::is_none) {
                            self.report.waits_on_absent_ranks += 1;
                        }
                        let summary = EntrySummary::of(self.ctx, &inst, range.clone());
                        inst.summaries[slot] = Some(Box::new(summary));
                    }
                    self.count_exit(lane.rank_idx, r, &inst, raw_end, recorded_end);
                    if !range.is_empty() {
                        depends = true;
                    }
                    match slot.and_then(|slot| inst.summaries[slot].as_deref()) {
                        Some(summary) => {
                            required = required.max(summary.required(r.me as usize, latency));
                        }
                        None => {
                            if range.clone().any(|k| inst.starts[k].is_none()) {
                                self.report.waits_on_absent_ranks += 1;
                            }
                            for k in range {
                                if let Some(s) = inst.starts[k] {
                                    let gap = if k == r.me as usize { 0 } else { latency };
                                    required = required.max(s.saturating_add(gap));
                                }
                            }
                        }
                    }
                    inst.exits_left = inst.exits_left.saturating_sub(1);
                    if inst.exits_left > 0 {
                        self.colls.insert(r.key, inst);
                    }
                }
            }
        }
        let start = call.start.saturating_add(lane.shift);
        let mut end = raw_end.saturating_add(lane.shift);
        if self.repair.enabled {
            if end < required {
                end = required;
            } else if depends {
                // Amortised: the wait ends when what it waited for allows, not later than the
                // shifted end, and not before it started or before it ended as recorded.
                end = required.max(start).max(raw_end).min(end);
            }
            lane.shift = end - raw_end;
            lane.max_shift = lane.max_shift.max(lane.shift);
        }
        if let Some(Event::Call(c)) = lane.held.first_mut() {
            c.start = start;
            c.end = end;
        }
        lane.spare_needs = needs;
        true
    }
}
