//! The hot path: storing one event into this thread's buffer, with the cheap checks it needs
//! (filter, request bookkeeping). When storing allocated a new block, it hands over to the back
//! end through the crate's one growth hook ([`crate::buffer_grew`]), once the call and its
//! completions are all stored.

use std::sync::Once;
use std::sync::atomic::Ordering;

use format::{Completion, Event, Marker, MpiCall, NO_RANK, NO_REQUEST, NO_TAG};

use crate::clock;
use crate::front::cost::{
    self, charge_growth, charge_unrecorded, charged_cost, estimate_and_sampling, sample_end,
};
use crate::front::requests::{self, ReqKind};
use crate::front::{buffers, filter};
use crate::lifecycle::session::session;

/// Request bookkeeping requested by the C layer (`evf_call_t.req_op`).
pub const REQ_NONE: u8 = 0;
pub const REQ_NEW: u8 = 1;
pub const REQ_NEW_PERSISTENT: u8 = 2;
pub const REQ_START: u8 = 3;
pub const REQ_FREE: u8 = 4;
/// The call names a live request and leaves it as it is (`MPI_Pready`, `MPI_Parrived`).
pub const REQ_USE: u8 = 5;
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

static LOST_WARNING: Once = Once::new();

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
    if tb.growth_pending.load(Ordering::Relaxed) {
        report_pending_growth(tb);
    }
    let request = if rec.req_op == REQ_NONE {
        NO_REQUEST
    } else {
        request_of(tb, rec)
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
    let read_cost = cost::read_cost();
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
        tb.growth_pending.store(true, Ordering::Relaxed);
    }
    sampled
}

/// The request id of a call that makes, starts, frees or uses a request.
#[inline(never)]
fn request_of(tb: &buffers::ThreadBuf, rec: &CallRecord) -> u64 {
    match rec.req_op {
        REQ_NEW | REQ_NEW_PERSISTENT => {
            let kind = match rec.req_kind {
                KIND_SEND => ReqKind::Send,
                KIND_RECV => ReqKind::Recv,
                _ => ReqKind::Other,
            };
            requests::create(
                &tb.request_ids,
                rec.req_handle,
                kind,
                rec.bytes,
                rec.req_op == REQ_NEW_PERSISTENT,
            )
        }
        REQ_START => requests::start(rec.req_handle),
        REQ_FREE => requests::free(rec.req_handle),
        REQ_USE => requests::lookup(rec.req_handle),
        _ => NO_REQUEST,
    }
}

/// The rarer call records: profile mode, call sites, idle polls.
#[cold]
#[inline(never)]
fn record_call_slow(tb: &buffers::ThreadBuf, rec: &CallRecord, mut call: MpiCall) -> bool {
    let read_cost = cost::read_cost();
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
                    call.site =
                        crate::front::callsites::site_of(&mut l.sites, &mut l.buf, rec.site);
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
        tb.growth_pending.store(true, Ordering::Relaxed);
    }
    sampled
}

/// Hands a growth that happened inside the thread's last call and its completions to the back
/// end, now that the group is whole ([`buffers::ThreadBuf::growth_pending`]).
#[cold]
#[inline(never)]
fn report_pending_growth(tb: &buffers::ThreadBuf) {
    tb.growth_pending.store(false, Ordering::Relaxed);
    crate::buffer_grew();
}

/// Records that up to `events` events could not be recorded (warned once on stderr).
pub fn lost(events: u64) {
    if events == 0 {
        return;
    }
    LOST_WARNING.call_once(|| {
        let rank = session().map_or(0, |s| s.rank);
        say!("evenflush: rank {rank}: out of memory in the recorder; some completions are lost (marked in the trace)");
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
        tb.growth_pending.store(true, Ordering::Relaxed);
    }
}

/// Stores any other event (definitions, markers, user records).
pub fn record_event(event: &Event) {
    let tb = buffers::mine();
    if tb.growth_pending.load(Ordering::Relaxed) {
        report_pending_growth(tb);
    }
    let ((), grew) = buffers::with_buf(tb, |l| match l.profile() {
        Some(p) => p.add_event(tb.stream, event),
        None => l.buf.push_event(event),
    });
    if grew > 0 {
        crate::buffer_grew();
    }
}
