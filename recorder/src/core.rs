//! The recorder's state and the record paths the C hooks call.
//!
//! Cost accounting (the direct perturbation `cost` of each call record): the C wrapper reads the
//! clock right before (t0) and right after (t1) the PMPI call; everything the wrapper does after
//! t1 (communicator lookup, type size, request bookkeeping, storing the record, and for a
//! blocking collective the protocol's hook) plus one clock read is its cost. Reading the clock a
//! third time for every event would itself cost several ns, so:
//! - fast path, sampled per function: every [`SAMPLE_EVERY`]-th call of each function on a
//!   thread, and its first [`WARMUP_SAMPLES`] calls, are sampled: the wrapper reads the clock once its
//!   work for the call is done (t2, [`sample_end`]; after the collective hook, before completion
//!   processing, which is measured on its own), and `t2 - t1 + one clock read` updates that
//!   function's estimate on this thread (the fastest warm-up sample, then a moving average;
//!   samples above [`OUTLIER_NS`] are preemptions or page faults, not the recorder, and are
//!   dropped; others are clipped to 4x the estimate). Every call is charged its function's estimate: a barrier's hook, an `Isend`'s
//!   request table and a `Comm_rank`'s bare append each cost what they cost, where one estimate
//!   for all calls charged each kind the mix's average. A decision point of the protocol is not
//!   sampled (it is measured and charged on its own);
//! - slow paths, exact: when storing the record allocated a new block, the hard limit forced a
//!   local flush, or a Wait/Test/receive produced completions (processed after the call's record
//!   was stored), the whole extra time is measured and charged to the thread's next event (that
//!   time passes between this event's end and the next one's start, so that is where it perturbs).
//!   Slow-path measurements are wall time, so a preemption that hits one is included;
//! - user records and regions (`evenflush_record`, `evenflush_region_*`) have no cost field: their
//!   whole time in the recorder is charged the same way to the thread's next call.
//!
//! The clock read cost is measured at init (minimum of back-to-back reads).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, Once};

use format::profile::ProfileStats;
use format::{
    ClockCalibration, Completion, Event, FileHeader, Marker, MpiCall, NO_RANK, NO_REQUEST, NO_TAG,
};
use offload::config::Config;

use crate::buffers::{self, Taken};
use crate::clock;
use crate::filter;
use crate::requests::{self, ReqKind};
use crate::sink;

/// One call of each function in this many takes a third clock read to measure the recorder's cost.
pub const SAMPLE_EVERY: u16 = 32;
/// The first calls of each function on a thread are all sampled, so its estimate settles quickly.
pub const WARMUP_SAMPLES: u16 = 8;
/// A fast-path sample longer than this is an interruption, not recorder work.
pub const OUTLIER_NS: f64 = 20_000.0;

/// Request bookkeeping requested by the C layer (`evf_call_t.req_op`).
pub const REQ_NONE: u8 = 0;
pub const REQ_NEW: u8 = 1;
pub const REQ_NEW_PERSISTENT: u8 = 2;
pub const REQ_START: u8 = 3;
pub const REQ_FREE: u8 = 4;
/// Request kinds (`evf_call_t.req_kind`).
pub const KIND_SEND: u8 = 1;
pub const KIND_RECV: u8 = 2;

/// A call as the C layer hands it over; mirrors `evf_call_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CallRecord {
    pub start: u64,
    pub end: u64,
    pub bytes: u64,
    pub recv_bytes: u64,
    pub site: u64,
    pub req_handle: u64,
    pub comm: u32,
    pub peer: i32,
    pub tag: i32,
    pub root: i32,
    pub func: u16,
    pub req_op: u8,
    pub req_kind: u8,
    /// A poll that found nothing: folded with the polls before it ([`format::PollRun`]).
    pub idle: u8,
}

/// Fixed facts about this rank's recording, set once at init.
#[derive(Debug)]
pub struct Session {
    pub rank: u32,
    pub size: u32,
    pub thread_level: i32,
    pub config: Config,
    pub clock: ClockCalibration,
    pub read_cost: u64,
}

static SESSION: OnceLock<Session> = OnceLock::new();
static ACTIVE: AtomicBool = AtomicBool::new(false);
static FINISHED: AtomicBool = AtomicBool::new(false);
static FINISH_DONE: AtomicBool = AtomicBool::new(false);
static LOCAL_FLUSHES: AtomicU64 = AtomicU64::new(0);
static IN_MEMORY_COMPRESSIONS: AtomicU64 = AtomicU64::new(0);
static FLUSH_LOCK: Mutex<()> = Mutex::new(());
static LIMIT_WARNING: Once = Once::new();
static LOST_WARNING: Once = Once::new();
static LIMIT: AtomicU64 = AtomicU64::new(u64::MAX);
static READ_COST: AtomicU64 = AtomicU64::new(0);
static OUTLIER_TICKS: AtomicU64 = AtomicU64::new(u64::MAX);

pub fn session() -> Option<&'static Session> {
    SESSION.get()
}

/// Whether events are being recorded (between init and finalize).
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// Starts recording. Returns false (and stays inert) if a session already exists.
pub fn start_session(session: Session) -> bool {
    let limit = session.config.limit;
    READ_COST.store(session.read_cost, Ordering::Relaxed);
    OUTLIER_TICKS.store(
        (OUTLIER_NS * 1e-9 * session.clock.ticks_per_sec) as u64,
        Ordering::Relaxed,
    );
    if SESSION.set(session).is_err() {
        return false;
    }
    LIMIT.store(limit, Ordering::Relaxed);
    if let Some(s) = SESSION.get()
        && s.config.mode == offload::config::Mode::Profile
    {
        buffers::enable_profile(profile_template(s));
    }
    ACTIVE.store(true, Ordering::Release);
    true
}

/// What every thread's profile statistics start from: the rank, the clock, and the names of all
/// wrapped functions (a thread may call MPI before it has seen any definition).
fn profile_template(s: &Session) -> ProfileStats {
    let mut p = ProfileStats::new(s.rank, s.size, 1e9 / s.clock.ticks_per_sec);
    for (id, (name, _)) in crate::functions::FUNCTIONS.iter().enumerate() {
        p.add_event(
            0,
            &Event::FunctionDef {
                id: id as format::FunctionId,
                name: (*name).to_string(),
            },
        );
    }
    p
}

/// Profile mode: merges every thread's statistics and writes `profile-NNNNN.json`.
fn write_profile(taken: &mut [Taken]) {
    let Some(s) = session() else { return };
    let mut merged = ProfileStats::new(s.rank, s.size, 1e9 / s.clock.ticks_per_sec);
    let mut any = false;
    for t in taken.iter_mut() {
        if let Some(p) = t.profile.take() {
            // Events stored before profile mode began (none normally) are not lost either.
            let mut p = *p;
            for e in t.buf.iter() {
                p.add_event(t.stream, &e);
            }
            merged.span_ns = merged.span_ns.or(p.span_ns);
            merged.merge(&p);
            any = true;
        }
    }
    if !any {
        return;
    }
    let dir = s
        .config
        .out
        .first()
        .cloned()
        .unwrap_or_else(|| "evenflush-trace".into());
    let path = dir.join(format::profile::profile_file_name(s.rank));
    if let Err(e) = std::fs::write(&path, merged.to_json()) {
        eprintln!(
            "evenflush: rank {}: cannot write {}: {e}",
            s.rank,
            path.display()
        );
    }
}

fn clip_u32(v: u64) -> u32 {
    v.min(u32::MAX as u64) as u32
}

/// What one call is charged: the estimate for its function, never less than one clock read,
/// plus the measured slow-path time carried over to it.
///
/// The floor holds for every call, because by definition (module doc) a call's cost includes the
/// clock read that closes its record. In practice it only acts before a sample has set the
/// estimate: every sample includes that read, so a settled estimate is never below it; but the
/// warm-up samples can all be interrupted and dropped, and a call charged 0 then would claim the
/// recorder cost nothing (a fresh-clone CI run caught exactly that).
#[inline]
fn charged_cost(estimate: u64, read_cost: u64, carry: u64) -> u32 {
    clip_u32(estimate.max(read_cost).saturating_add(carry))
}

/// Stores one call record on this thread's buffer, and ends its cost sample at once if it is
/// sampled (callers without a wrapper around them).
pub fn record_call(rec: &CallRecord) {
    let tb = buffers::mine();
    if record_call_on(tb, rec) {
        sample_end(tb, rec.func, rec.end);
    }
}

/// `MPI_Pcontrol`'s function id: its calls set the recording level.
const PCONTROL: format::FunctionId = crate::functions::const_id_of("MPI_Pcontrol");

/// Stores one call record (the hot path) on `tb`, which must be this thread's buffer. Returns
/// whether this call's cost is sampled: the caller then calls [`sample_end`] with the call's
/// end tick once the recorder's work for the call is done (the C wrapper does so after the
/// protocol hook of a collective, so that a sample covers everything the wrapper adds).
///
/// What a call needs is done here, nothing more: no request table unless the call makes,
/// starts or frees a request; the filter is two loads unless filters or pauses are set; the
/// cost is the function's estimate plus what the previous call carried over, and one call in
/// [`SAMPLE_EVERY`] (and each function's first calls) is sampled.
#[inline]
pub fn record_call_on(tb: &buffers::ThreadBuf, rec: &CallRecord) -> bool {
    let request = if rec.req_op == REQ_NONE {
        NO_REQUEST
    } else {
        request_of(rec)
    };
    if rec.func == PCONTROL {
        // The wrapper passes the level as the tag.
        filter::pcontrol(rec.tag);
    }
    let admitted = filter::admit_call(rec.func);
    tb.skipping.store(!admitted, Ordering::Relaxed);
    if !admitted {
        charge_unrecorded(tb, rec.end);
        return false;
    }
    let mut call = MpiCall {
        func: rec.func,
        start: rec.start,
        end: rec.end,
        comm: rec.comm,
        peer: rec.peer,
        tag: rec.tag,
        bytes: rec.bytes,
        root: rec.root,
        request,
        cost: 0,
        recv_bytes: rec.recv_bytes,
        site: format::NO_SITE,
    };
    if buffers::profiling() || rec.site != 0 || rec.idle != 0 {
        return record_call_slow(tb, rec, call);
    }
    let read_cost = READ_COST.load(Ordering::Relaxed);
    let (sampled, grew) = buffers::with_buf_hot(tb, |l| {
        let (estimate, sampled) = estimate_and_sampling(l, rec.func);
        call.cost = charged_cost(estimate, read_cost, l.cost_carry);
        l.cost_carry = 0;
        if l.buf.append_call(&call) {
            charge_growth(l, rec.end, estimate, read_cost);
            return (false, true);
        }
        (sampled, false)
    });
    if grew > 0 {
        check_limit();
    }
    sampled
}

/// The request id of a call that makes, starts or frees a request.
#[inline(never)]
fn request_of(rec: &CallRecord) -> u64 {
    match rec.req_op {
        REQ_NEW | REQ_NEW_PERSISTENT => {
            let kind = match rec.req_kind {
                KIND_SEND => ReqKind::Send,
                KIND_RECV => ReqKind::Recv,
                _ => ReqKind::Other,
            };
            requests::create(
                rec.req_handle,
                kind,
                rec.bytes,
                rec.req_op == REQ_NEW_PERSISTENT,
            )
        }
        REQ_START => requests::start(rec.req_handle),
        REQ_FREE => requests::free(rec.req_handle),
        _ => NO_REQUEST,
    }
}

/// The cost estimate charged to a call of `func`, and whether this call is sampled: every
/// [`SAMPLE_EVERY`]-th call of each function on the thread, and every call of a function in its
/// first [`WARMUP_SAMPLES`] samples.
#[inline(always)]
fn estimate_and_sampling(l: &mut buffers::Local, func: format::FunctionId) -> (u64, bool) {
    let Some(f) = l.cost.get_mut(usize::from(func)) else {
        return (u64::from(l.cost_any), false);
    };
    let estimate = if f.estimate == 0 {
        l.cost_any
    } else {
        f.estimate
    };
    if f.countdown == 0 {
        f.countdown = if f.samples < WARMUP_SAMPLES {
            0
        } else {
            SAMPLE_EVERY - 1
        };
        return (u64::from(estimate), true);
    }
    f.countdown -= 1;
    (u64::from(estimate), false)
}

/// Storing the record allocated a block: the whole time since the call ended is measured, and
/// what exceeds the estimate already charged goes to the next event.
#[cold]
#[inline(never)]
fn charge_growth(l: &mut buffers::Local, call_end: u64, estimate: u64, read_cost: u64) {
    let measured = clock::now().wrapping_sub(call_end).wrapping_add(read_cost);
    l.cost_carry += measured.saturating_sub(estimate.max(read_cost));
}

/// The rarer call records: profile mode, call sites, idle polls.
#[cold]
#[inline(never)]
fn record_call_slow(tb: &buffers::ThreadBuf, rec: &CallRecord, mut call: MpiCall) -> bool {
    let read_cost = READ_COST.load(Ordering::Relaxed);
    let (sampled, grew) = buffers::with_buf(tb, |l| {
        let (estimate, sampled) = estimate_and_sampling(l, rec.func);
        call.cost = charged_cost(estimate, read_cost, l.cost_carry);
        l.cost_carry = 0;
        let allocated = match l.profile() {
            Some(p) => {
                p.add_event(tb.stream, &Event::Call(call));
                false
            }
            None => {
                let cap_before = l.buf.capacity_bytes();
                if rec.site != 0 {
                    call.site = crate::callsites::site_of(&mut l.sites, &mut l.buf, rec.site);
                }
                if rec.idle != 0 {
                    l.buf.push_idle_poll(&call);
                } else {
                    l.buf.push_call(&call);
                }
                l.buf.capacity_bytes() != cap_before
            }
        };
        if allocated {
            charge_growth(l, rec.end, estimate, read_cost);
            return false;
        }
        sampled
    });
    if grew > 0 {
        check_limit();
    }
    sampled
}

/// Ends the cost sample of a call of `func` that ended at tick `call_end` (the C wrapper calls
/// it when its work for a sampled call is done): `now - call_end + one clock read` is what the
/// recorder added to this call after `PMPI_*` returned, including the read that opened the
/// call's record. It updates the function's estimate (a moving average; samples above
/// [`OUTLIER_NS`] are preemptions or page faults, not the recorder, and are dropped; others are
/// clipped to 4x the estimate).
pub fn sample_end(tb: &buffers::ThreadBuf, func: format::FunctionId, call_end: u64) {
    let now = clock::now();
    let read_cost = READ_COST.load(Ordering::Relaxed);
    let measured = now.wrapping_sub(call_end).wrapping_add(read_cost);
    if measured > OUTLIER_TICKS.load(Ordering::Relaxed) {
        return; // preempted or faulted: says nothing about the recorder's cost
    }
    let measured = clip_u32(measured);
    buffers::with_buf_hot(tb, |l| {
        if let Some(f) = l.cost.get_mut(usize::from(func)) {
            let e = u64::from(f.estimate);
            f.estimate = if f.samples < WARMUP_SAMPLES {
                // Warm-up: the first calls of a function run cold (page faults, first
                // allocations of its tables); the fastest of them is the best start.
                if e == 0 {
                    measured
                } else {
                    measured.min(f.estimate)
                }
            } else {
                ((3 * e + u64::from(measured).min(4 * e)) / 4) as u32
            };
            f.samples = f.samples.saturating_add(1);
        }
        l.cost_any = measured;
        ((), false)
    });
}

/// What a call that is not recorded (filtered, or paused by `MPI_Pcontrol`) costs the recorder
/// after the MPI call returned: estimated from every 32nd such call and charged to the next
/// recorded event, so that reconstruction removes it like any other recorder time. Without it, a
/// polling loop left out of the trace still slowed the program by its wrapper's work (Debian's
/// hpcc: +22 % after reconstruction).
fn charge_unrecorded(tb: &buffers::ThreadBuf, call_end: u64) {
    static ESTIMATE: AtomicU64 = AtomicU64::new(0);
    thread_local! {
        static CALLS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    }
    let read_cost = READ_COST.load(Ordering::Relaxed);
    let k = CALLS.with(|c| {
        let k = c.get();
        c.set(k.wrapping_add(1));
        k
    });
    let estimate = ESTIMATE.load(Ordering::Relaxed);
    let ((), _) = buffers::with_buf(tb, |l| l.cost_carry += estimate.saturating_add(read_cost));
    if k < 8 || k.is_multiple_of(32) {
        let measured = clock::now().wrapping_sub(call_end);
        if estimate == 0 || measured < 8 * estimate {
            let new = if estimate == 0 {
                measured
            } else {
                (3 * estimate + measured.min(4 * estimate)) / 4
            };
            ESTIMATE.store(new, Ordering::Relaxed);
        }
    }
}

/// Charges `ticks` of measured recorder work (plus one clock read) to this thread's next event.
pub fn charge(ticks: u64) {
    charge_on(buffers::mine(), ticks);
}

/// [`charge`] on `tb`, which must be this thread's buffer.
pub fn charge_on(tb: &buffers::ThreadBuf, ticks: u64) {
    let read_cost = READ_COST.load(Ordering::Relaxed);
    buffers::with_buf_hot(tb, |l| {
        l.cost_carry += ticks.saturating_add(read_cost);
        ((), false)
    });
}

/// Records that up to `events` events could not be recorded (warned once on stderr).
pub fn lost(events: u64) {
    if events == 0 {
        return;
    }
    LOST_WARNING.call_once(|| {
        let rank = session().map_or(0, |s| s.rank);
        eprintln!("evenflush: rank {rank}: out of memory in the recorder; some completions are lost (marked in the trace)");
    });
    record_event(&Event::Marker(Marker::Lost {
        time: clock::now(),
        events,
    }));
}

/// Stores the completion of a request (or, with `handle == 0`, of a blocking receive).
pub fn record_completion(handle: u64, source: i32, tag: i32, bytes: u64, cancelled: bool) {
    record_completion_on(buffers::mine(), handle, source, tag, bytes, cancelled);
}

/// [`record_completion`] on `tb`, which must be this thread's buffer.
pub fn record_completion_on(
    tb: &buffers::ThreadBuf,
    handle: u64,
    source: i32,
    tag: i32,
    bytes: u64,
    cancelled: bool,
) {
    if tb.skipping.load(Ordering::Relaxed) {
        // The request is over all the same: a later request reusing the handle must not
        // inherit it.
        if handle != 0 {
            requests::complete(handle);
        }
        return;
    }
    let completion = if handle == 0 {
        Completion {
            request: NO_REQUEST,
            source,
            tag,
            bytes,
            cancelled,
        }
    } else {
        match requests::complete(handle) {
            None => return,
            Some(r) => match r.kind {
                ReqKind::Recv => Completion {
                    request: r.id,
                    source,
                    tag,
                    bytes,
                    cancelled,
                },
                ReqKind::Other if r.id == NO_REQUEST => Completion {
                    request: r.id,
                    source,
                    tag,
                    bytes,
                    cancelled,
                },
                _ => Completion {
                    request: r.id,
                    source: NO_RANK,
                    tag: NO_TAG,
                    bytes: r.bytes,
                    cancelled,
                },
            },
        }
    };
    let ((), grew) = buffers::with_buf(tb, |l| match l.profile() {
        Some(p) => p.add_event(tb.stream, &Event::Completion(completion)),
        None => l.buf.push_completion(&completion),
    });
    if grew > 0 {
        check_limit();
    }
}

/// Stores any other event (definitions, markers, user records).
pub fn record_event(event: &Event) {
    let tb = buffers::mine();
    let ((), grew) = buffers::with_buf(tb, |l| match l.profile() {
        Some(p) => p.add_event(tb.stream, event),
        None => l.buf.push_event(event),
    });
    if grew > 0 {
        check_limit();
    }
}

/// After a buffer grew: mode `local` flushes past S, and a memory sample may be due. Past the
/// hard limit, the recorder first compresses its buffers in memory and keeps the chunks for the
/// next flushing suspension (FORMAT.md `Compressed`): the program keeps its timing, and only the
/// compression's time is recorder cost. Only when the compressed backlog itself takes half the
/// limit (data that does not compress), or in the modes that do not suspend collectively, does
/// the rank write alone (a local flush: timing may be perturbed; the trace says so).
fn check_limit() {
    if crate::signals::forked_child() {
        return;
    }
    crate::protocol::after_buffer_growth();
    crate::memory_watch::maybe_periodic();
    let limit = LIMIT.load(Ordering::Relaxed);
    let held = || buffers::held_bytes() + sink::held_compressed();
    if held() <= limit {
        return;
    }
    let Ok(_guard) = FLUSH_LOCK.try_lock() else {
        return; // another thread is flushing right now
    };
    if held() <= limit {
        return;
    }
    // What is held may be mostly the empty part of each thread's current block (a limit below
    // the block size): writing or compressing a few records then frees nothing lasting.
    if buffers::used_bytes() < limit / 4 {
        return;
    }
    let t0 = clock::now();
    let raw_held = buffers::held_bytes();
    let (taken, _) = buffers::take_all(None);
    let collective = session().is_some_and(|s| {
        matches!(
            s.config.mode,
            offload::config::Mode::Dynamic
                | offload::config::Mode::Static
                | offload::config::Mode::NoRemeasure
        )
    });
    if collective && sink::held_compressed() < limit / 2 {
        let (raw_bytes, stored_bytes) = sink::compress_in_memory(taken);
        IN_MEMORY_COMPRESSIONS.fetch_add(1, Ordering::Relaxed);
        record_event(&Event::Marker(Marker::Compressed {
            time: t0,
            raw_bytes,
            stored_bytes,
        }));
        crate::memory_watch::at_compression();
        let t1 = clock::now();
        buffers::with_mine(|l| l.cost_carry += t1.wrapping_sub(t0));
        return;
    }
    sink::write(taken);
    LOCAL_FLUSHES.fetch_add(1, Ordering::Relaxed);
    LIMIT_WARNING.call_once(|| {
        let rank = session().map_or(0, |s| s.rank);
        let why = if collective {
            "and what it compressed in memory since the last flush takes half of it"
        } else {
            "in a mode without collective flushes"
        };
        eprintln!(
            "evenflush: rank {rank}: recorder memory reached the limit ({raw_held} bytes held) {why}; \
             flushing locally (marked in the trace; raise EVENFLUSH_LIMIT to avoid it)"
        );
    });
    let t1 = clock::now();
    record_event(&Event::Marker(Marker::LocalFlush {
        time: t0,
        bytes: raw_held,
    }));
    buffers::with_mine(|l| l.cost_carry += t1.wrapping_sub(t0));
}

/// How many times the hard limit made this rank compress in memory.
pub fn in_memory_compressions() -> u64 {
    IN_MEMORY_COMPRESSIONS.load(Ordering::Relaxed)
}

/// How many local flushes the hard limit forced so far.
pub fn local_flushes() -> u64 {
    LOCAL_FLUSHES.load(Ordering::Relaxed)
}

/// Takes every thread's buffered events, for a writer (offload suspension, finalize).
pub fn take_all_buffers() -> Vec<Taken> {
    buffers::take_all(None).0
}

/// Whether [`finish`] has started: nothing recorded after it is written.
pub fn finished() -> bool {
    FINISHED.load(Ordering::Acquire)
}

/// Writes what every thread holds now and keeps recording (before an application's own SIGTERM
/// handler runs: if it ends the process without `exit`, the trace so far is on disk).
pub fn checkpoint() {
    if !active() || finished() || crate::signals::forked_child() {
        return;
    }
    // Not on the thread that makes MPI calls: MPI-IO is not an option here.
    sink::leave_mpiio();
    // The signal's handler waits for this before the application's handler runs: a buffer the
    // signal caught mid-append is left for a later write rather than waited for.
    let (taken, _) = buffers::take_all(Some(1 << 20));
    sink::write(taken);
}

/// [`finish`] for `MPI_Abort`: on a thread of its own, waited for at most `--abort-flush-limit`,
/// so that a hanging disk cannot keep the job from ending.
pub fn finish_bounded(abnormal: i32) {
    let limit = session().map_or(std::time::Duration::from_secs(10), |s| {
        s.config.abort_flush_limit
    });
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("evenflush-abort".into())
        .spawn(move || {
            finish(Some(abnormal));
            let _ = done_tx.send(());
        });
    match spawned {
        Ok(_) => {
            if done_rx.recv_timeout(limit).is_err() {
                let rank = session().map_or(0, |s| s.rank);
                eprintln!(
                    "evenflush: rank {rank}: the trace was not written within {limit:?} \
                     (--abort-flush-limit); its end may be missing"
                );
            }
        }
        // No thread to spare: write inline, unbounded rather than not at all.
        Err(_) => finish(Some(abnormal)),
    }
}

/// Ends recording and writes everything held. `abnormal` is `Some(signal)` when not called from
/// `MPI_Finalize` (0 = exit without finalize, -1 = `MPI_Abort`). Runs at most once; a second
/// caller waits (bounded) for the first, so that the process does not end under a writer.
pub fn finish(abnormal: Option<i32>) {
    if crate::signals::forked_child() {
        // A forked child holds a copy of the parent's buffers and sink: never write them.
        return;
    }
    if FINISHED.swap(true, Ordering::AcqRel) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !FINISH_DONE.load(Ordering::Acquire) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        return;
    }
    ACTIVE.store(false, Ordering::Release);
    let held = buffers::held_bytes();
    if abnormal.is_some_and(|sig| sig != 0) {
        // Signals and MPI_Abort write from a thread of ours, where MPI-IO is not allowed (and an
        // aborting MPI may not serve it).
        sink::leave_mpiio();
    }
    let (mut taken, busy) = match abnormal {
        // A crashed thread may be stuck halfway through an append: never wait for it for long.
        Some(sig) if sig > 0 => buffers::take_all(Some(1 << 20)),
        _ => buffers::take_all(None),
    };
    let rank = session().map_or(0, |s| s.rank);
    if busy.streams == [u32::MAX] {
        // A crashed thread holds the buffer registry: no buffer can be reached or counted.
        eprintln!(
            "evenflush: rank {rank}: the recorder's buffers could not be reached after the signal; \
             the events they held are lost (how many is unknown)"
        );
    } else if !busy.streams.is_empty() {
        eprintln!(
            "evenflush: rank {rank}: {} thread buffer(s) were in use when the signal arrived; up to {} events are lost",
            busy.streams.len(),
            busy.events
        );
    }
    if let Some(signal) = abnormal {
        let mut tail = format::RawBuf::new();
        let time = clock::now();
        if !busy.streams.is_empty() {
            tail.push_event(&Event::Marker(Marker::RecordingStopped { time }));
            if busy.events > 0 {
                tail.push_event(&Event::Marker(Marker::Lost {
                    time,
                    events: busy.events,
                }));
            }
        }
        tail.push_event(&Event::Marker(Marker::AbnormalEnd { time, signal }));
        // Written as the last chunk of the first thread's stream, after everything else.
        taken.push(Taken {
            stream: 0,
            buf: tail,
            profile: None,
        });
    }
    if session().is_some_and(|s| s.config.mode == offload::config::Mode::Profile) {
        write_profile(&mut taken);
        // The profile file is the whole output: no rank file in this mode.
        taken.clear();
    }
    let events: u64 = taken.iter().map(|t| t.buf.events()).sum();
    let used: u64 = taken.iter().map(|t| t.buf.bytes() as u64).sum();
    let t0 = clock::now();
    let stats = sink::write(taken);
    sink::close();
    let t1 = clock::now();
    if stats.events_lost > 0 {
        eprintln!(
            "evenflush: rank {rank}: {} events could not be written",
            stats.events_lost
        );
    }
    if std::env::var_os("EVENFLUSH_VERBOSE").is_some() {
        let tps = session().map_or(1e9, |s| s.clock.ticks_per_sec);
        eprintln!(
            "evenflush: rank {rank}: {events} events in memory, {used} bytes used ({:.1} B/event), {held} bytes held; \
             wrote {} bytes ({} raw) in {:.1} ms to {}",
            used as f64 / events.max(1) as f64,
            stats.bytes_stored,
            stats.bytes_raw,
            t1.wrapping_sub(t0) as f64 / tps * 1e3,
            sink::path()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        );
    }
    FINISH_DONE.store(true, Ordering::Release);
}

/// Builds the rank file header for this session.
pub fn file_header(rank: u32, size: u32, clock: ClockCalibration) -> FileHeader {
    FileHeader {
        rank,
        world_size: size,
        part: 0,
        clock,
        created_unix_ns: clock::realtime_ns(),
        producer: format!("evenflush-recorder {}", env!("CARGO_PKG_VERSION")),
    }
}

#[cfg(test)]
mod tests {
    use super::charged_cost;

    #[test]
    fn every_call_is_charged_at_least_one_clock_read() {
        // No settled estimate yet (all warm-up samples dropped): the read alone.
        assert_eq!(charged_cost(0, 25, 0), 25);
        // An estimate below one read cannot come from a sample, but is floored all the same.
        assert_eq!(charged_cost(10, 25, 0), 25);
        // A settled estimate is charged as is, plus the carried slow-path time.
        assert_eq!(charged_cost(40, 25, 0), 40);
        assert_eq!(charged_cost(40, 25, 1_000), 1_040);
        assert_eq!(charged_cost(0, 25, 7), 32);
        // The record's field is 32 bits: clipped, never wrapped.
        assert_eq!(charged_cost(40, 25, u64::MAX), u32::MAX);
    }
}
