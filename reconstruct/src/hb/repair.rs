//! The repair: a forward pass in the spirit of the controlled logical clock. Each lane carries a
//! shift; when a receive (or collective exit) would end before what it depends on (plus the
//! minimum latency), the shift grows just enough, and every later event of the lane moves by it.
//!
//! The shift is amortised at the next wait: a later receive or collective exit ends when its
//! dependencies allow, but never before its recorded end, so a lane that had slack (it waited
//! anyway) gives the correction back there instead of carrying it to the end of the run. Local
//! order and every dependency are kept; only waits change length.
//!
//! The replay ([`super::Repair::replay`]) goes further: every wait is recomputed from its
//! partners, so a wait may also get shorter. A call that waits ends at the later of its own start
//! plus its intrinsic cost and the moment what it waits for is there in the replayed run (the
//! matched send's replayed start plus the transfer time, or the last awaited entry of the
//! collective plus its exit time), with the [`super::Estimates`] learned from the run as
//! recorded. Whether the call waited is judged as recorded: one that did keeps only its
//! intrinsic cost and what it spent after its dependency was there; one that did not keeps its
//! whole duration. Everything between two waits (the program's own bursts, with DP' and DP
//! removed by the mapping) keeps its length.

use format::Event;

use super::collective_instance::{CollInst, EntrySummary, LatestOthers};
use super::estimates::size_class;
use super::matcher::{Class, Need};
use super::violations::{entries_known, waited_for};
use super::{Lane, MessageMatch, OutputBound, Shared};

/// What a held call depends on, in the replay: the latest moment over its dependencies at which
/// what it waits for is there, in the replayed times and as recorded.
#[derive(Default)]
struct Dependency {
    replayed: Option<i64>,
    recorded: Option<i64>,
}

impl Dependency {
    fn offer(&mut self, replayed: i64, recorded: i64) {
        self.replayed = Some(self.replayed.map_or(replayed, |r| r.max(replayed)));
        self.recorded = Some(self.recorded.map_or(recorded, |r| r.max(recorded)));
    }
}

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
                    self.ranks[lane.rank_idx]
                        .sent_here
                        .contains_key(&(*key, *seq))
                        || self.absent(key.1)
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
        // The call alone (`Copy`), not a clone of the event.
        let Some(&Event::Call(call)) = lane.held.first() else {
            return true;
        };
        let raw_end = call.end;
        let recorded_end = raw_end.saturating_add(lane.held_removed);
        let done = Self::at(lane, lane.held_index);
        let latency = self.repair.min_latency_ns;
        let mut required = 0u64;
        let mut depends = false;
        let replay = self.repair.enabled && self.repair.replay;
        let mut dependency = Dependency::default();
        let my_group = self.ctx.clock_group(lane.rank_idx);
        for need in &needs {
            match need {
                Need::Msg { key, seq, post } => {
                    let Some(send) = self.ranks[lane.rank_idx].sent_here.remove(&(*key, *seq))
                    else {
                        self.report.unmatched_receives += 1;
                        if self.absent(key.1) {
                            self.report.waits_on_absent_ranks += 1;
                        }
                        continue;
                    };
                    let epoch = key.3 == super::matcher::EPOCH_TAG;
                    let sender = self.ctx.index_of(key.1).unwrap_or(lane.rank_idx);
                    // An epoch edge moves no bytes of its own: a class apart from messages.
                    let class = (
                        self.ctx.clock_group(sender),
                        my_group,
                        if epoch {
                            u8::MAX
                        } else {
                            size_class(send.bytes)
                        },
                    );
                    if let Some(learned) = self.learned.as_mut() {
                        learned.learn_transfer(
                            class,
                            recorded_end as i64 - send.recorded_start as i64,
                        );
                    }
                    if replay && let Some(est) = self.ctx.estimates.as_ref() {
                        let transfer = est.transfer(class, latency);
                        dependency.offer(
                            send.start as i64 + transfer,
                            send.recorded_start as i64 + transfer,
                        );
                    }
                    self.count_message(
                        epoch,
                        sender,
                        lane.rank_idx,
                        send.raw_start,
                        send.recorded_start,
                        raw_end,
                        recorded_end,
                    );
                    if self.output.is_some() {
                        let tol = self.ctx.tolerance(sender, lane.rank_idx);
                        let what = if epoch {
                            OutputBound::Epoch
                        } else {
                            OutputBound::Message
                        };
                        let bound = i128::from(send.start) - i128::from(tol);
                        self.output_bounds.push((what, bound));
                    }
                    required = required.max(send.start.saturating_add(latency));
                    depends = true;
                    let recv_end =
                        raw_end
                            .saturating_add_signed(lane.shift)
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
                    self.pending_matches.push(MessageMatch {
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
                    if self.output.is_some() {
                        let bound = self.exit_output_bound(lane.rank_idx, r, &inst);
                        self.output_bounds.push((OutputBound::Exit, bound));
                    }
                    if !range.is_empty() {
                        depends = true;
                    }
                    if self.learned.is_some() || replay {
                        let me = r.me as usize;
                        let (latest, latest_recorded) =
                            match slot.and_then(|slot| inst.summaries[slot].as_deref()) {
                                Some(summary) => summary.latest_others(me),
                                None => latest_others_in(&inst, range.clone(), me),
                            };
                        let members = size_class(inst.members.len() as u64);
                        let func = self.ctx.global_func(lane.rank_idx, call.func);
                        let bytes = size_class(call.bytes.max(call.recv_bytes));
                        let class_of = |k: usize| {
                            let group = self
                                .ctx
                                .index_of(inst.members[k])
                                .map_or(u32::MAX, |i| self.ctx.clock_group(i));
                            (func, bytes, members, my_group, group)
                        };
                        if let (Some(learned), Some((s, k))) =
                            (self.learned.as_mut(), latest_recorded)
                        {
                            learned.learn_exit(class_of(k), recorded_end as i64 - s as i64);
                        }
                        if replay
                            && let Some(est) = self.ctx.estimates.as_ref()
                            && let (Some((s, k)), Some((s_rec, k_rec))) = (latest, latest_recorded)
                        {
                            dependency.offer(
                                s as i64 + est.exit(class_of(k), latency),
                                s_rec as i64 + est.exit(class_of(k_rec), latency),
                            );
                        }
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
        let duration = raw_end.saturating_sub(call.start);
        if self.learned.is_some() {
            let class = self.intrinsic_class(lane, &call);
            if let Some(learned) = self.learned.as_mut() {
                learned.learn_intrinsic(class, duration);
            }
        }
        let start = call.start.saturating_add_signed(lane.shift);
        let mut end = raw_end.saturating_add_signed(lane.shift);
        let mut start = start;
        if replay {
            // Only a call that waits for something takes the run into its wait.
            let poll_run = dependency
                .replayed
                .and_then(|_| poll_run_before(lane, &call));
            // A loop of polls and the call that ends it are one wait, begun where the loop began
            // after the program's own work inside the loop.
            end = match &poll_run {
                Some(l) => self.replayed_loop_end(lane, &call, l, dependency),
                None => self.replayed_end(
                    lane,
                    &call,
                    start,
                    call.start.saturating_add(lane.held_removed),
                    dependency,
                ),
            };
            let old_shift = lane.shift;
            lane.set_shift(end as i64 - raw_end as i64);
            if poll_run.is_some() {
                start = place_poll_run(lane, old_shift, &call);
                // Stored for the partners with the shift before this call.
                if lane.held_stored
                    && start != call.start.saturating_add_signed(old_shift)
                    && let Some(o) = self.output.as_mut()
                {
                    o.exact = false;
                }
            } else {
                // A run no wait took goes out as it was (the shift did not change before it).
                for e in &mut lane.pending {
                    super::shift_times(e, old_shift);
                }
            }
        } else if self.repair.enabled {
            if end < required {
                end = required;
            } else if depends {
                // Amortised: the wait ends when what it waited for allows, not later than the
                // shifted end, and not before it started or before it ended as recorded.
                end = required.max(start).max(raw_end).min(end);
            }
            lane.set_shift(end as i64 - raw_end as i64);
        }
        self.count_output(end);
        if let Some(Event::Call(c)) = lane.held.first_mut() {
            c.start = start;
            c.end = end;
        }
        for mut m in self.pending_matches.drain(..) {
            if replay {
                m.recv_end = end;
            }
            on_match(&m);
        }
        lane.spare_needs = needs;
        true
    }

    /// The class of a held call's intrinsic cost: its function and size (bytes, or for a call
    /// that completes requests, how many it completed).
    fn intrinsic_class<I>(&self, lane: &Lane<I>, call: &format::MpiCall) -> (u32, u8) {
        let func = self.ctx.global_func(lane.rank_idx, call.func);
        let size = if self.class(lane.rank_idx, call.func) == Class::Completion {
            lane.held
                .iter()
                .filter(|e| matches!(e, Event::Completion(_)))
                .count() as u64
        } else {
            call.bytes.max(call.recv_bytes)
        };
        (func, size_class(size))
    }

    /// The replayed end of the held call whose wait begins at `start` (replayed times) and
    /// `recorded_start` (as recorded).
    fn replayed_end<I>(
        &self,
        lane: &Lane<I>,
        call: &format::MpiCall,
        start: u64,
        recorded_start: u64,
        dependency: Dependency,
    ) -> u64 {
        let duration = call.end.saturating_sub(call.start);
        let own_end = start.saturating_add(duration);
        let (Some(est), Some(replayed), Some(recorded)) = (
            self.ctx.estimates.as_ref(),
            dependency.replayed,
            dependency.recorded,
        ) else {
            return own_end;
        };
        let intrinsic = est.intrinsic(self.intrinsic_class(lane, call), duration);
        let recorded_start = recorded_start as i64;
        let recorded_end = call.end.saturating_add(lane.held_removed) as i64;
        let replayed = replayed.max(0) as u64;
        if recorded > recorded_start + intrinsic as i64 {
            // It waited: what it spent after its dependency was there stays, the wait does not
            // (a blocking call has no recorder cost inside it).
            let after = (recorded_end - recorded).max(0) as u64;
            start
                .saturating_add(intrinsic)
                .max(replayed.saturating_add(after))
        } else {
            own_end.max(replayed)
        }
    }
}

impl Shared<'_> {
    /// The replayed end of the call that ends a polling loop. A loop that polled at all began
    /// before its dependency was there, so it waited; it ends `after` the dependency, where
    /// `after` is what followed the later of the loop's last poll and the dependency as
    /// recorded (the call that found it and the program's work before that call, without the
    /// recorder's cost), plus the part of the loop past the dependency that one untraced poll
    /// can explain. The rest of the loop's
    /// overrun is the recorder's cost inside it: polls made slower by the recorder notice an
    /// arrival later, and fewer of them fit.
    fn replayed_loop_end<I>(
        &self,
        lane: &Lane<I>,
        call: &format::MpiCall,
        run: &PollRun,
        dependency: Dependency,
    ) -> u64 {
        let start = run.base.saturating_add_signed(lane.shift);
        let duration = call.end.saturating_sub(call.start);
        let (Some(est), Some(replayed), Some(recorded)) = (
            self.ctx.estimates.as_ref(),
            dependency.replayed,
            dependency.recorded,
        ) else {
            return start.saturating_add(duration);
        };
        let intrinsic = est.intrinsic(self.intrinsic_class(lane, call), duration);
        let run_end = run.end.saturating_add(lane.pending_removed) as i64;
        let recorded_end = call.end.saturating_add(lane.held_removed) as i64;
        let dp_after = lane.held_removed.saturating_sub(lane.pending_removed) as i64;
        let tail = (recorded_end - run_end.max(recorded) - dp_after).max(0) as u64;
        let overrun = (run_end - recorded).clamp(0, run.poll_period as i64) as u64;
        start
            .saturating_add(intrinsic)
            .max((replayed.max(0) as u64).saturating_add(tail + overrun))
    }
}

/// A run of polls right before a call that waits (pending on its lane, unshifted).
struct PollRun {
    /// Where the wait would begin if the first poll had found what it waited for: the run's
    /// start plus the program's own work between the polls (neither the polls nor the
    /// recorder's cost inside the run), plus what came between the run and the call.
    base: u64,
    /// The run's end (the end of its last poll).
    end: u64,
    /// One poll's own time without the recorder (the loop's busy time over its polls).
    poll_period: u64,
}

fn poll_run_before<I>(lane: &Lane<I>, call: &format::MpiCall) -> Option<PollRun> {
    let Some(Event::Polls(p)) = lane.pending.first() else {
        return None;
    };
    let work = (p.end.saturating_sub(p.start)).saturating_sub(p.busy.saturating_add(p.inner_cost));
    let between = call.start.saturating_sub(p.end);
    Some(PollRun {
        base: p.start.saturating_add(work).saturating_add(between),
        end: p.end,
        poll_period: p.busy / p.count.max(1),
    })
}

/// Places the pending run of polls and what follows it before the held call, now that the
/// call's end (and the lane's new shift) are known: the run starts where it did (the lane's
/// shift before it), everything after it moves with the call, and nothing goes back before the
/// run's start. Returns the call's start.
fn place_poll_run<I>(lane: &mut Lane<I>, old_shift: i64, call: &format::MpiCall) -> u64 {
    let new_shift = lane.shift;
    let mut floor = 0u64;
    for (k, e) in lane.pending.iter_mut().enumerate() {
        if k == 0
            && let Event::Polls(p) = e
        {
            p.start = p.start.saturating_add_signed(old_shift);
            p.end = p.end.saturating_add_signed(new_shift).max(p.start);
            floor = p.end;
            continue;
        }
        trace::times::for_each_time(e, |t| *t = t.saturating_add_signed(new_shift).max(floor));
    }
    call.start.saturating_add_signed(new_shift).max(floor)
}

/// The latest entry of another member than `me` among `range`, replayed and as recorded, each
/// with its position (for exits that no summary serves: a few members each).
fn latest_others_in(inst: &CollInst, range: std::ops::Range<usize>, me: usize) -> LatestOthers {
    let latest = |starts: &[Option<u64>]| {
        range
            .clone()
            .filter(|&k| k != me)
            .filter_map(|k| starts[k].map(|s| (s, k)))
            .max()
    };
    (latest(&inst.starts), latest(&inst.recorded_starts))
}
