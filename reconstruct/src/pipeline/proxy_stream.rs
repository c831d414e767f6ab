//! The proxies of a split pass ([`super::split`]) streaming between the processes while the pass
//! runs: the steps of a process's own ranks make them ([`Shared::stream_proxies`]), the matching
//! thread sends them in batches and takes the others' into an [`Inbox`], and the engine reads
//! each proxy lane from it ([`StreamedProxy`]), waiting when a lane has nothing yet.
//!
//! Waiting is safe as long as something is in flight. When every lane of every process waits and
//! nothing is (each process's count of batches sent to another equals that one's count received,
//! as last reported to process 0), the process holding the wait that began first forces it, as
//! one process does when all of its lanes wait: this happens only when times contradict each
//! other or the trace lacks a partner, never on a trace whose messages all match.
//!
//! A process's engine runs only on the thread that owns the transport (MPI is initialised for one
//! thread); it sends from a backlog, keeping few sends in flight, and takes what arrived at every
//! turn, so two processes never wait on each other's sends.

use std::cell::RefCell;
use std::collections::VecDeque;

use format::Event;

use super::steps::{IdleEncoders, Shared};
use crate::hb::{self, ProxyFilter, Unstuck};
use crate::job::{self, LaneBatch, Mailbox, StepMessage, StuckReport};
use crate::options::RebuildError;

/// A proxy event: its index in the whole lane, the time the mapping removed, the replay's move
/// of the lane there (0 when nothing is replayed), the event as recorded.
type ProxyItem = (u64, u64, i64, Event);

/// Proxy events received and not taken yet, by lane number, with whether the lane ended.
pub(super) struct Inbox {
    queues: Vec<VecDeque<ProxyItem>>,
    finished: Vec<bool>,
}

impl Inbox {
    pub(super) fn new(lanes: usize) -> Inbox {
        Inbox {
            queues: (0..lanes).map(|_| VecDeque::new()).collect(),
            finished: vec![false; lanes],
        }
    }

    fn add(&mut self, batch: LaneBatch) -> Result<(), String> {
        let lane = batch.lane as usize;
        let (Some(queue), Some(finished)) =
            (self.queues.get_mut(lane), self.finished.get_mut(lane))
        else {
            return Err(format!(
                "a proxy batch for lane {lane}, which is not in the trace"
            ));
        };
        if *finished {
            return Err(format!("a proxy batch for lane {lane} after it ended"));
        }
        let mut shifts = batch.shifts.into_iter();
        queue.extend(
            batch
                .indices
                .into_iter()
                .zip(batch.removed)
                .zip(batch.events)
                .map(|((i, r), e)| (i, r, shifts.next().unwrap_or(0), e)),
        );
        *finished = batch.finished;
        Ok(())
    }
}

/// One proxy lane, read from the inbox.
pub(super) struct StreamedProxy<'s> {
    inbox: &'s RefCell<Inbox>,
    lane: usize,
    index: u64,
    removed: u64,
    shift: i64,
}

impl<'s> StreamedProxy<'s> {
    pub(super) fn new(inbox: &'s RefCell<Inbox>, lane: usize) -> StreamedProxy<'s> {
        StreamedProxy {
            inbox,
            lane,
            index: 0,
            removed: 0,
            shift: 0,
        }
    }
}

impl Iterator for StreamedProxy<'_> {
    type Item = Event;
    fn next(&mut self) -> Option<Event> {
        let (index, removed, shift, event) =
            self.inbox.borrow_mut().queues[self.lane].pop_front()?;
        self.index = index;
        self.removed = removed;
        self.shift = shift;
        Some(event)
    }
}

impl hb::LaneSource for StreamedProxy<'_> {
    fn removed_ns(&self) -> u64 {
        self.removed
    }
    fn source_index(&self) -> Option<u64> {
        Some(self.index)
    }
    fn more_later(&self) -> bool {
        !self.inbox.borrow().finished[self.lane]
    }
    fn shift_ns(&self) -> i64 {
        self.shift
    }
}

/// A streamed replay makes its proxies as its engine takes the own lanes' calls (their replayed
/// times exist only there): per own lane, by position, its lane number and a filter per other
/// process.
pub(super) struct ReplayedProxies<'c> {
    lanes: Vec<(usize, Vec<(usize, ProxyFilter<'c>)>)>,
    /// Per process, the batches made and not yet collected.
    made: Vec<Vec<LaneBatch>>,
}

impl<'c> ReplayedProxies<'c> {
    pub(super) fn new(
        lanes: Vec<(usize, Vec<(usize, ProxyFilter<'c>)>)>,
        processes: usize,
    ) -> Self {
        ReplayedProxies {
            lanes,
            made: (0..processes).map(|_| Vec::new()).collect(),
        }
    }

    /// The batch of lane `lane` for process `q`: the last one made, if it is that lane's.
    fn batch(made: &mut Vec<LaneBatch>, lane: usize) -> &mut LaneBatch {
        if made.last().is_none_or(|b| b.lane as usize != lane) {
            made.push(LaneBatch {
                lane: lane as u32,
                ..LaneBatch::default()
            });
        }
        let last = made.len() - 1;
        &mut made[last]
    }
}

/// Sends begun and not complete beyond which the backlog waits: MPI's sends of large messages
/// complete only when the receiver takes them, so the sender must go on receiving meanwhile.
const SENDS_IN_FLIGHT: usize = 8;

/// One process's side of the exchange (see the module docs).
pub(super) struct ProxyPump<'s, 'a> {
    /// `None` for a process that failed before the pass: it only takes part.
    shared: Option<&'s Shared<'a>>,
    /// Takes this pass's messages only: from a process that ended the pass, nothing more is.
    mail: &'s Mailbox<'s>,
    inbox: &'s RefCell<Inbox>,
    /// The lane number of each of the engine's lanes, by position (own lanes first).
    lane_of: Vec<usize>,
    has_workers: bool,
    me: usize,
    sent: Vec<u64>,
    received: Vec<u64>,
    backlog: VecDeque<(usize, Vec<u8>)>,
    /// Process 0: each process's last report while it waits, its own included.
    waiting: Vec<Option<StuckReport>>,
    ended: Vec<bool>,
    failure: Option<String>,
    /// Lane turns so far (see [`TURNS_PER_LOOK`]).
    turns: u32,
    /// A streamed replay's own proxies (see [`ReplayedProxies`]).
    replayed: Option<ReplayedProxies<'s>>,
    /// For the work this thread does while it waits.
    idle: IdleEncoders,
}

impl<'s, 'a> ProxyPump<'s, 'a> {
    pub(super) fn new(
        shared: Option<&'s Shared<'a>>,
        mail: &'s Mailbox<'s>,
        inbox: &'s RefCell<Inbox>,
        lane_of: Vec<usize>,
        has_workers: bool,
        steps_level: i32,
    ) -> Self {
        let job = mail.job;
        let size = job.size();
        ProxyPump {
            shared,
            mail,
            inbox,
            lane_of,
            has_workers,
            me: job.rank(),
            sent: vec![0; size],
            received: vec![0; size],
            backlog: VecDeque::new(),
            waiting: vec![None; size],
            ended: (0..size).map(|q| q == job.rank()).collect(),
            failure: None,
            turns: 0,
            replayed: None,
            idle: IdleEncoders::new(steps_level),
        }
    }

    /// A streamed replay: the proxies come from the engine's calls, not from the steps.
    pub(super) fn with_replayed(mut self, replayed: ReplayedProxies<'s>) -> Self {
        self.replayed = Some(replayed);
        self
    }

    /// Fails the pass here and tells every other process, once.
    pub(super) fn fail(&mut self, reason: String) {
        if self.failure.is_some() {
            return;
        }
        if let Some(shared) = self.shared {
            shared.fail(RebuildError::Job(reason.clone()));
        }
        for q in (0..self.sent.len()).filter(|&q| q != self.me) {
            // A process that cannot be told will not be waited for either: the job is failing.
            self.mail
                .job
                .send(q, job::TAG_FAILED, reason.as_bytes())
                .ok();
        }
        self.failure = Some(reason);
    }

    /// Moves the batches the steps made into the backlog, one message per process.
    fn collect(&mut self) {
        let Some(shared) = self.shared else {
            return;
        };
        let (from_steps, failed) = shared.take_outgoing();
        if failed {
            self.fail(format!("process {} failed", self.me));
        }
        let outgoing = match &mut self.replayed {
            Some(replayed) => {
                let empty = (0..replayed.made.len()).map(|_| Vec::new()).collect();
                std::mem::replace(&mut replayed.made, empty)
            }
            None => from_steps,
        };
        for (q, lanes) in outgoing.into_iter().enumerate() {
            if !lanes.is_empty() && self.failure.is_none() {
                let message = StepMessage {
                    rank_idx: self.me as u32,
                    events_read: 0,
                    lanes,
                };
                self.backlog.push_back((q, message.encode()));
            }
        }
    }

    /// Sends from the backlog while few sends are in flight; whether it is empty.
    fn send_some(&mut self) -> Result<bool, String> {
        while let Some((q, _)) = self.backlog.front() {
            let q = *q;
            if self.mail.job.sends_pending()? >= SENDS_IN_FLIGHT {
                return Ok(false);
            }
            if let Some((_, bytes)) = self.backlog.pop_front() {
                self.mail.job.send_later(q, job::TAG_PROXIES, bytes)?;
                self.sent[q] += 1;
            }
        }
        Ok(true)
    }

    /// Takes one message; what it means to an engine that waits, if anything.
    fn handle(&mut self, from: usize, tag: u32, bytes: Vec<u8>) -> Option<Unstuck> {
        match tag {
            job::TAG_PROXIES => {
                self.received[from] += 1;
                if self.failure.is_some() {
                    return None;
                }
                let added = StepMessage::decode(&bytes).and_then(|message| {
                    let mut inbox = self.inbox.borrow_mut();
                    message.lanes.into_iter().try_for_each(|b| inbox.add(b))
                });
                match added {
                    Ok(()) => Some(Unstuck::Moved),
                    Err(e) => {
                        self.fail(format!("process {from}'s proxies: {e}"));
                        Some(Unstuck::Stop)
                    }
                }
            }
            job::TAG_STUCK if self.me == 0 => match StuckReport::decode(&bytes) {
                Ok(report) => {
                    self.waiting[from] = Some(report);
                    self.decide()
                }
                Err(e) => {
                    self.fail(format!("process {from}'s report: {e}"));
                    Some(Unstuck::Stop)
                }
            },
            job::TAG_FORCE => Some(Unstuck::Force),
            job::TAG_FAILED => {
                let reason = String::from_utf8_lossy(&bytes).into_owned();
                if let Some(shared) = self.shared {
                    shared.fail(RebuildError::Job(reason.clone()));
                }
                self.failure.get_or_insert(reason);
                Some(Unstuck::Stop)
            }
            job::TAG_END => {
                self.ended[from] = true;
                None
            }
            other => {
                self.fail(format!(
                    "process {from} sent an unexpected message (tag {other})"
                ));
                Some(Unstuck::Stop)
            }
        }
    }

    /// Process 0: when every process waits and no batch is in flight, the process holding the
    /// wait that began first forces it (this one: `Force`; another: told so).
    fn decide(&mut self) -> Option<Unstuck> {
        let all: Vec<&StuckReport> = self
            .waiting
            .iter()
            .map(Option::as_ref)
            .collect::<Option<_>>()?;
        let n = all.len();
        let quiet = (0..n).all(|p| (0..n).all(|q| all[p].sent.get(q) == all[q].received.get(p)));
        if !quiet {
            return None;
        }
        let first = (0..n)
            .filter_map(|p| all[p].first_wait.map(|wait| (wait, p)))
            .min();
        let Some((_, p)) = first else {
            if all.iter().all(|r| r.done) {
                return None;
            }
            self.fail("the split pass stalled: proxy lanes did not end".into());
            return Some(Unstuck::Stop);
        };
        self.waiting[p] = None;
        if p == self.me {
            return Some(Unstuck::Force);
        }
        if let Err(e) = self.mail.job.send(p, job::TAG_FORCE, &[]) {
            self.fail(e);
            return Some(Unstuck::Stop);
        }
        None
    }

    fn take_arrived(&mut self) -> Result<Option<Unstuck>, String> {
        let mut outcome = None;
        loop {
            let ended = &self.ended;
            let Some((from, tag, bytes)) = self.mail.try_recv(|from, _| !ended[from])? else {
                break;
            };
            match self.handle(from, tag, bytes) {
                Some(Unstuck::Stop) => return Ok(Some(Unstuck::Stop)),
                Some(u) => outcome = Some(u),
                None => {}
            }
        }
        Ok(outcome)
    }

    fn report(&self, first_wait: Option<(u64, usize)>, done: bool) -> StuckReport {
        StuckReport {
            first_wait: first_wait.map(|(since, li)| (since, self.lane_of[li] as u64)),
            done,
            sent: self.sent.clone(),
            received: self.received.clone(),
        }
    }

    /// Tells process 0 that this process waits (or is done); process 0 itself decides at once.
    fn tell_waiting(&mut self, report: StuckReport) -> Result<Option<Unstuck>, String> {
        if self.me == 0 {
            self.waiting[0] = Some(report);
            return Ok(self.decide());
        }
        self.mail.job.send(0, job::TAG_STUCK, &report.encode())?;
        Ok(None)
    }

    /// Sends the whole backlog, taking what arrives meanwhile.
    fn send_all(&mut self) -> Result<Option<Unstuck>, String> {
        let mut outcome = None;
        while !self.send_some()? {
            if let Some(u) = self.take_arrived()? {
                if matches!(u, Unstuck::Stop) {
                    return Ok(Some(u));
                }
                outcome = Some(u);
            }
            std::thread::yield_now();
        }
        Ok(outcome)
    }

    fn try_stuck(&mut self, first_wait: Option<(u64, usize)>) -> Result<Unstuck, String> {
        if self.failure.is_some() {
            return Ok(Unstuck::Stop);
        }
        if let Some(shared) = self.shared {
            shared.wait_idle(self.has_workers);
        }
        self.collect();
        let sent = self.send_all()?;
        if let Some(u) = self.take_arrived()?.or(sent) {
            return Ok(u);
        }
        // Waiting only once nothing is left to do here: a step may make proxies, which go out
        // before process 0 hears that this one waits (its count of what is in flight).
        if let Some(shared) = self.shared {
            while shared.work_while_waiting(&mut self.idle) {
                self.collect();
                // A unit that failed failed the pass (`collect` told the others).
                if self.failure.is_some() {
                    return Ok(Unstuck::Stop);
                }
                let sent = self.send_all()?;
                if let Some(u) = self.take_arrived()?.or(sent) {
                    return Ok(u);
                }
            }
        }
        // Most waits end within microseconds, when the other process sends what it made at its
        // own collective: look for that a while before telling process 0, whose decisions are
        // needed only when every process waits for good. Yielding between looks leaves the core
        // to the process waited for when processes outnumber cores.
        let since = std::time::Instant::now();
        while since.elapsed() < REPORT_AFTER {
            if let Some(u) = self.take_arrived()? {
                return Ok(u);
            }
            std::thread::yield_now();
        }
        if let Some(u) = self.tell_waiting(self.report(first_wait, false))? {
            self.waiting[0] = None;
            return Ok(u);
        }
        loop {
            let ended = &self.ended;
            let (from, tag, bytes) = self.mail.recv(|from, _| !ended[from])?;
            if let Some(u) = self.handle(from, tag, bytes) {
                self.waiting[0] = None;
                return Ok(u);
            }
        }
    }

    /// After the engine returned: sends what is left, tells process 0 this one is done and
    /// every process that nothing more comes, and takes everything until each other process
    /// said the same. The reason the pass failed, if it did.
    pub(super) fn finish(mut self) -> Result<(), String> {
        self.collect();
        self.send_all()?;
        // Done: process 0 can pick no wait of this one's, so this decides nothing here.
        self.tell_waiting(self.report(None, true))?;
        for q in (0..self.sent.len()).filter(|&q| q != self.me) {
            self.mail.job.send(q, job::TAG_END, &[])?;
        }
        while !self.ended.iter().all(|&e| e) {
            let ended = &self.ended;
            let (from, tag, bytes) = self.mail.recv(|from, _| !ended[from])?;
            self.handle(from, tag, bytes);
        }
        self.mail.job.complete_sends()?;
        self.failure.map_or(Ok(()), Err)
    }
}

/// How long a process that waits looks for what arrives before it reports that it waits.
const REPORT_AFTER: std::time::Duration = std::time::Duration::from_micros(200);

/// Lane turns between two looks for what arrived: a look costs MPI a progress pass, and a
/// process that waits looks at once anyway.
const TURNS_PER_LOOK: u32 = 16;

impl hb::Pump for ProxyPump<'_, '_> {
    fn poll(&mut self) {
        self.turns = self.turns.wrapping_add(1);
        if !self.turns.is_multiple_of(TURNS_PER_LOOK) {
            return;
        }
        let polled = (|| {
            self.collect();
            self.send_some()?;
            self.take_arrived()
        })();
        if let Err(e) = polled {
            self.fail(e);
        }
    }

    fn own_call(&mut self, lane: usize, index: u64, removed: u64, shift: i64, call: &Event) {
        let Some(replayed) = &mut self.replayed else {
            return;
        };
        let Some((global, filters)) = replayed.lanes.get_mut(lane) else {
            return;
        };
        for (q, filter) in filters {
            if filter.wants(call) {
                let batch = ReplayedProxies::batch(&mut replayed.made[*q], *global);
                batch.indices.push(index);
                batch.removed.push(removed);
                batch.shifts.push(shift);
                batch.events.push(call.clone());
            }
        }
    }

    fn own_lane_ended(&mut self, lane: usize) {
        let Some(replayed) = &mut self.replayed else {
            return;
        };
        let Some((global, filters)) = replayed.lanes.get(lane) else {
            return;
        };
        for &(q, _) in filters {
            ReplayedProxies::batch(&mut replayed.made[q], *global).finished = true;
        }
    }

    fn stuck(&mut self, first_wait: Option<(u64, usize)>) -> Unstuck {
        match self.try_stuck(first_wait) {
            Ok(u) => u,
            Err(e) => {
                self.fail(e);
                Unstuck::Stop
            }
        }
    }
}
