//! OTF2 archives (the format of Score-P, read by Vampir, Scalasca, `otf2-print`), written through
//! the system's OTF2 library (`libopen-trace-format2`, FFI in `otf2_ffi.rs`). Compiled in when
//! `build.rs` finds the library's headers (`cfg(have_otf2)`); otherwise [`export`] says so.
//!
//! What is written:
//! - one location group (process) per rank, one location (thread) per recording stream;
//! - every MPI call as the Enter/Leave of a region named after the function (role by kind);
//! - point-to-point records: `MpiSend` at a blocking send's start, `MpiIsend` at a nonblocking
//!   send's start and `MpiIsendComplete` at the end of the `Wait*`/`Test*` that completed it,
//!   `MpiIrecvRequest` at an `Irecv` and `MpiIrecv` (source, tag and size from the status) at the end
//!   of the call that completed it, `MpiRecv` at the end of a blocking receive; `Sendrecv` gives an
//!   `MpiSend` and an `MpiRecv`. Peers are ranks within the communicator, as OTF2 wants;
//! - blocking collectives as `MpiCollectiveBegin`/`MpiCollectiveEnd` inside their region, with
//!   the recorded bytes as the size sent (what this rank's send buffer holds) and the bytes that
//!   arrived in its receive buffer as the size received (`MpiCall::recv_bytes`; 0 in traces
//!   recorded before chunk version 6, and for `Alltoallw` and neighbourhood collectives).
//!   Nonblocking collectives are regions only;
//! - one-sided communication as OTF2's RMA records and MPI-IO as its I/O records, as far as the
//!   trace carries them (`otf2_rma.rs`, `otf2_io.rs` say what is written and what cannot be);
//! - communicators, groups and windows as Scalasca reads them (`otf2_comms.rs`): a
//!   `COMM_LOCATIONS` group, `COMM_GROUP`s of world ranks, `MPI_COMM_SELF` over the `COMM_SELF`
//!   group, parents, `InterComm`s, `RmaWin`s; the MPI paradigm with Score-P's name templates.
//!   Debian's python3-otf2 3.0.2 (and Pipit, which reads through it) fails on `InterComm`
//!   definitions and on printing multi-bit flags such as a fence's synchronisation level, as it
//!   does on Score-P's archives: `paper-notes/views.md` has the cause and a workaround;
//! - suspensions as `MeasurementOnOff` (off at the suspension's start, on at its end): every
//!   suspension stops the program, and an analysis should leave the whole interval out, which is
//!   what a measurement-off interval tells OTF2 tools. Inside it, when the rank wrote its trace,
//!   a `BufferFlush` from the start over the write (`write_ns`), as Score-P marks its own flushes;
//! - no `ClockOffset` definitions: the times written are already in the global clock (the
//!   measured offsets applied, `trace::clock`), and offsets would make a reader that applies them
//!   (Scalasca's clock correction) correct twice.
//!
//! Times: the global clock in nanoseconds (timer resolution 1e9), clamped to never decrease
//! within a location as OTF2 requires. Memory: one event buffer per location inside the library,
//! the requests in flight per rank, and the definitions.

use std::path::Path;

use super::ExportError;
use trace::Trace;

/// Whether this build can write OTF2.
pub const AVAILABLE: bool = cfg!(have_otf2);

/// What the export wrote.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Otf2Summary {
    pub locations: u64,
    /// OTF2 event records written, all locations.
    pub events: u64,
    /// `MpiSend` + `MpiIsend` records (one per message sent).
    pub sends: u64,
    /// `MpiRecv` + `MpiIrecv` records.
    pub receives: u64,
    /// `MpiCollectiveEnd` records.
    pub collectives: u64,
    /// `RmaPut` + `RmaGet` + `RmaAtomic` records.
    pub rma_operations: u64,
    /// `IoOperationBegin` records.
    pub io_operations: u64,
    pub suspensions: u64,
    /// `BufferFlush` records: suspensions in which the rank wrote its trace.
    pub buffer_flushes: u64,
    /// What the window left out: calls and suspensions outside its time, and every event of a
    /// rank outside it (whose locations are defined but empty).
    pub cut: u64,
    /// What the window was.
    pub window: String,
    pub skipped: Vec<trace::Skipped>,
}

/// Writes `trace` as an OTF2 archive in directory `out` (`out/traces.otf2` is the anchor file).
/// An earlier archive there is replaced. `progress(done, total)` in events.
pub fn export(
    trace: &Trace,
    out: &Path,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Otf2Summary, ExportError> {
    let window = trace::window::Window::everything(trace.world_size);
    export_window(trace, out, &window, progress)
}

/// [`export`] of what lies in `window`: calls and suspensions that overlap it, their times cut
/// to its edges. Every rank keeps its location group and locations, so that the definitions
/// stay whole; those of ranks outside the window hold no events.
pub fn export_window(
    trace: &Trace,
    out: &Path,
    window: &trace::window::Window,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Otf2Summary, ExportError> {
    #[cfg(have_otf2)]
    {
        imp::export(trace, out, window, progress).map(|s| Otf2Summary {
            window: window.describe(),
            ..s
        })
    }
    #[cfg(not(have_otf2))]
    {
        let _ = (trace, out, window, progress);
        Err(ExportError::Other(
            "this evenflush was built without OTF2 support (libopen-trace-format2 headers were not \
             found at build time)"
                .into(),
        ))
    }
}

#[cfg(have_otf2)]
mod imp {
    use std::cell::Cell;
    use std::collections::{BTreeMap, HashMap};
    use std::ffi::{CStr, CString, c_void};
    use std::path::Path;
    use std::ptr;

    use format::requests::{MatchedProbes, PersistentRequests, Probe};
    use format::{ANY_SOURCE, ANY_TAG, Completion, Event, MpiCall, NO_REQUEST, PROC_NULL};

    use super::super::otf2_comms::CommDefs;
    use super::super::otf2_ffi as ffi;
    use super::super::otf2_io::{self as io, IoCall, IoState};
    use super::super::otf2_rma::{Out, RmaCall, RmaState};
    use super::super::{ExportError, function_table};
    use super::Otf2Summary;
    use trace::Trace;
    use trace::clock::MapCursor;
    use trace::clock::TimeMap;
    use trace::funcs::CollShape;
    use trace::funcs::Deferred;
    use trace::funcs::FuncClass;
    use trace::open::for_each_event;
    use trace::scan::scan;

    const UNNAMED: &str = "MPI function without a name in the trace";

    fn check(code: ffi::OTF2_ErrorCode, what: &str) -> Result<(), ExportError> {
        if code == ffi::OTF2_SUCCESS {
            return Ok(());
        }
        // SAFETY: OTF2_Error_GetName/GetDescription return pointers to static NUL-terminated
        // strings for every code (unknown codes included).
        let (name, desc) = unsafe {
            (
                CStr::from_ptr(ffi::OTF2_Error_GetName(code)).to_string_lossy(),
                CStr::from_ptr(ffi::OTF2_Error_GetDescription(code)).to_string_lossy(),
            )
        };
        Err(ExportError::Other(format!(
            "OTF2: {what} failed: {name} ({desc})"
        )))
    }

    /// The timestamp the library stamps on a flush of its event buffers: the latest time written,
    /// so a flush record never goes back in time.
    unsafe extern "C" fn pre_flush(
        _user: *mut c_void,
        _file_type: u8,
        _location: u64,
        _caller: *mut c_void,
        _last: bool,
    ) -> u8 {
        ffi::OTF2_FLUSH
    }

    unsafe extern "C" fn post_flush(user: *mut c_void, _file_type: u8, _location: u64) -> u64 {
        // SAFETY: `user` is the `Cell<u64>` registered with the callbacks; the archive (and so
        // every call of this callback) does not outlive it, and all use is on this thread.
        unsafe { (*(user as *const Cell<u64>)).get() }
    }

    static FLUSH_CALLBACKS: ffi::OTF2_FlushCallbacks = ffi::OTF2_FlushCallbacks {
        otf2_pre_flush: Some(pre_flush),
        otf2_post_flush: Some(post_flush),
    };

    /// An open archive; closed on drop if not closed explicitly.
    struct Archive {
        ptr: *mut ffi::OTF2_Archive,
        /// Read by the post-flush callback; boxed so its address is stable.
        latest: Box<Cell<u64>>,
    }

    impl Archive {
        fn close(mut self) -> Result<(), ExportError> {
            let p = std::mem::replace(&mut self.ptr, ptr::null_mut());
            // SAFETY: `p` came from OTF2_Archive_Open and is closed exactly once (Drop sees null).
            check(unsafe { ffi::OTF2_Archive_Close(p) }, "closing the archive")
        }
    }

    impl Drop for Archive {
        fn drop(&mut self) {
            if !self.ptr.is_null() {
                // SAFETY: as in `close`; errors on this error path are not reportable.
                unsafe { ffi::OTF2_Archive_Close(self.ptr) };
            }
        }
    }

    #[derive(Default)]
    struct Strings {
        ids: HashMap<String, u32>,
        list: Vec<CString>,
    }

    impl Strings {
        fn id(&mut self, s: &str) -> u32 {
            if let Some(&id) = self.ids.get(s) {
                return id;
            }
            let id = self.list.len() as u32;
            // Interior NULs cannot come from MPI names; replace rather than fail.
            self.list
                .push(CString::new(s.replace('\0', " ")).unwrap_or_default());
            self.ids.insert(s.to_string(), id);
            id
        }
    }

    fn region_role(class: FuncClass, name: &str) -> u8 {
        match class {
            FuncClass::Send
            | FuncClass::Isend
            | FuncClass::Recv
            | FuncClass::Irecv
            | FuncClass::SendRecv
            | FuncClass::Completion => ffi::OTF2_REGION_ROLE_POINT2POINT,
            FuncClass::Collective(_) if name.eq_ignore_ascii_case("MPI_Barrier") => {
                ffi::OTF2_REGION_ROLE_BARRIER
            }
            FuncClass::Collective(shape) | FuncClass::Icollective(shape) => match shape {
                CollShape::OneToAll => ffi::OTF2_REGION_ROLE_COLL_ONE2ALL,
                CollShape::AllToOne => ffi::OTF2_REGION_ROLE_COLL_ALL2ONE,
                CollShape::AllToAll => ffi::OTF2_REGION_ROLE_COLL_ALL2ALL,
                _ => ffi::OTF2_REGION_ROLE_COLL_OTHER,
            },
            FuncClass::Other => ffi::OTF2_REGION_ROLE_FUNCTION,
        }
    }

    fn collective_op(name: &str) -> Option<u8> {
        let base = name.strip_prefix("MPI_")?.to_ascii_lowercase();
        Some(match base.as_str() {
            "barrier" => ffi::OTF2_COLLECTIVE_OP_BARRIER,
            "bcast" => ffi::OTF2_COLLECTIVE_OP_BCAST,
            "gather" => ffi::OTF2_COLLECTIVE_OP_GATHER,
            "gatherv" => ffi::OTF2_COLLECTIVE_OP_GATHERV,
            "scatter" => ffi::OTF2_COLLECTIVE_OP_SCATTER,
            "scatterv" => ffi::OTF2_COLLECTIVE_OP_SCATTERV,
            "allgather" => ffi::OTF2_COLLECTIVE_OP_ALLGATHER,
            "allgatherv" => ffi::OTF2_COLLECTIVE_OP_ALLGATHERV,
            "alltoall" => ffi::OTF2_COLLECTIVE_OP_ALLTOALL,
            "alltoallv" => ffi::OTF2_COLLECTIVE_OP_ALLTOALLV,
            "alltoallw" => ffi::OTF2_COLLECTIVE_OP_ALLTOALLW,
            "allreduce" => ffi::OTF2_COLLECTIVE_OP_ALLREDUCE,
            "reduce" => ffi::OTF2_COLLECTIVE_OP_REDUCE,
            "reduce_scatter" => ffi::OTF2_COLLECTIVE_OP_REDUCE_SCATTER,
            "reduce_scatter_block" => ffi::OTF2_COLLECTIVE_OP_REDUCE_SCATTER_BLOCK,
            "scan" => ffi::OTF2_COLLECTIVE_OP_SCAN,
            "exscan" => ffi::OTF2_COLLECTIVE_OP_EXSCAN,
            _ => return None,
        })
    }

    /// What the export does beyond the region for functions of no `FuncClass` of their own.
    #[derive(Clone, Copy)]
    enum Special {
        Rma(RmaCall),
        Io(IoCall),
        /// Creates a communicator from the one its call names: that one is the new one's parent.
        CommCreator,
    }

    impl Special {
        fn of(name: &str) -> Option<Special> {
            if let Some(kind) = RmaCall::of(name) {
                return Some(Special::Rma(kind));
            }
            if let Some(kind) = IoCall::of(name) {
                return Some(Special::Io(kind));
            }
            let base = name.strip_prefix("MPI_")?.to_ascii_lowercase();
            [
                "comm_dup",
                "comm_dup_with_info",
                "comm_idup",
                "comm_idup_with_info",
                "comm_split",
                "comm_split_type",
                "comm_create",
                "comm_create_group",
                "cart_create",
                "cart_sub",
                "graph_create",
                "dist_graph_create",
                "dist_graph_create_adjacent",
                "intercomm_create",
                "intercomm_merge",
            ]
            .contains(&base.as_str())
            .then_some(Special::CommCreator)
        }
    }

    /// A request in flight on a rank, between the call that created it and its completion.
    #[derive(Clone, Copy)]
    enum Open {
        Isend,
        Irecv { comm: u32 },
    }

    /// One location being written.
    struct Lane {
        writer: *mut ffi::OTF2_EvtWriter,
        last: u64,
        events: u64,
        /// A call waits here until the completions that follow it are known.
        pending: Option<(MpiCall, Vec<Completion>)>,
        /// Communicators (false) and windows (true) defined since the last call: the recorder
        /// defines what a call creates just before the call's own record.
        new_defs: Vec<(u32, bool)>,
        /// Those defined just before the pending call.
        call_defs: Vec<(u32, bool)>,
    }

    struct Writer<'a> {
        latest: &'a Cell<u64>,
        min_ts: u64,
        max_ts: u64,
        summary: Otf2Summary,
    }

    impl Writer<'_> {
        /// A time for `lane`: never before its previous one.
        fn ts(&mut self, lane: &mut Lane, global_ns: u64) -> u64 {
            let t = global_ns.max(lane.last);
            lane.last = t;
            self.min_ts = self.min_ts.min(t);
            self.max_ts = self.max_ts.max(t);
            self.latest.set(t);
            t
        }

        fn done(
            &mut self,
            lane: &mut Lane,
            code: ffi::OTF2_ErrorCode,
            what: &str,
        ) -> Result<(), ExportError> {
            lane.events += 1;
            self.summary.events += 1;
            check(code, what)
        }
    }

    struct RankCtx<'a> {
        funcs: &'a HashMap<u16, (String, FuncClass)>,
        special: HashMap<u16, Special>,
        deferred: HashMap<u16, Deferred>,
        persistent: PersistentRequests,
        /// With the probe's local communicator.
        probes: MatchedProbes<u32>,
        regions: &'a HashMap<String, u32>,
        comms: &'a HashMap<u32, u32>,
        defs: &'a CommDefs,
        slot: usize,
        /// The rank's I/O handle.
        io_handle: u32,
        open: HashMap<u64, Open>,
        window: &'a trace::window::Window,
        rma: RmaState,
        io: IoState,
        /// (child, parent) communicators, global ids.
        parents: Vec<(u32, u32)>,
    }

    impl RankCtx<'_> {
        /// The global window of the call: for a creating call the window defined just before it.
        fn rma_window(&self, kind: RmaCall, c: &MpiCall, lane: &Lane) -> Option<u32> {
            let local = match kind {
                RmaCall::Create { .. } => lane.call_defs.iter().rev().find(|d| d.1)?.0,
                _ => c.comm,
            };
            self.defs.win(self.slot, local)
        }

        fn window_events(&self, win: Option<u32>) -> bool {
            win.and_then(|w| self.defs.wins.get(w as usize))
                .is_some_and(|w| w.create_destroy)
        }

        /// The class and arguments of the plain call `c` acts as (Score-P's records for
        /// persistent and matched-probe messages): a started persistent send is an `Isend` and a
        /// started receive an `Irecv`, with the arguments of the request's `*_init`; an `Mrecv`
        /// is a `Recv` and an `Imrecv` an `Irecv` on the communicator of the probe that found
        /// the message. Keeps what init and probe records describe: call it for every call,
        /// inside the window or not, in the rank's order.
        fn as_message(
            &mut self,
            class: FuncClass,
            c: &MpiCall,
            completions: &[Completion],
        ) -> (FuncClass, MpiCall) {
            match self.deferred.get(&c.func).copied() {
                Some(kind @ (Deferred::SendInit | Deferred::RecvInit)) => {
                    self.persistent.init(kind == Deferred::SendInit, c);
                }
                Some(Deferred::Mprobe) => self.probes.mprobe(Some(Probe::of(c, c.comm))),
                Some(Deferred::Improbe) => self.probes.improbe(Some(Probe::of(c, c.comm))),
                Some(Deferred::Start) => {
                    if let Some(p) = self.persistent.started(c) {
                        let class = if p.send {
                            FuncClass::Isend
                        } else {
                            FuncClass::Irecv
                        };
                        return (class, p.call);
                    }
                }
                Some(Deferred::Mrecv) => {
                    let status = completions
                        .iter()
                        .find(|s| s.request == NO_REQUEST && s.source >= 0);
                    if let Some(p) = self
                        .probes
                        .take(status.map(|s| s.source), status.map(|s| s.tag))
                    {
                        return (FuncClass::Recv, MpiCall { comm: p.comm, ..*c });
                    }
                }
                Some(Deferred::Imrecv) => {
                    if let Some(p) = self.probes.take(None, None) {
                        let call = MpiCall {
                            comm: p.comm,
                            // MPI_MESSAGE_NO_PROC (a probe of MPI_PROC_NULL): no message.
                            peer: if c.peer == PROC_NULL {
                                PROC_NULL
                            } else {
                                p.source.unwrap_or(ANY_SOURCE)
                            },
                            tag: p.tag.unwrap_or(ANY_TAG),
                            ..*c
                        };
                        return (FuncClass::Irecv, call);
                    }
                }
                None => {}
            }
            (class, *c)
        }
    }

    /// Writes one held call with the completions that followed it.
    fn write_call(
        wr: &mut Writer,
        lane: &mut Lane,
        rc: &mut RankCtx,
        map: &TimeMap,
        cur: &mut MapCursor,
        c: &MpiCall,
        completions: &[Completion],
    ) -> Result<(), ExportError> {
        let (name, class) = rc
            .funcs
            .get(&c.func)
            .cloned()
            .unwrap_or_else(|| (format!("function#{}", c.func), FuncClass::Other));
        let (class, call) = rc.as_message(class, c, completions);
        let c = &call;
        let region = rc
            .regions
            .get(&name)
            .or_else(|| rc.regions.get(UNNAMED))
            .copied()
            .unwrap_or(0);
        let (g_start, g_end) = (
            map.absolute(map.global_ns(c.start, cur)),
            map.absolute(map.global_ns(c.end, cur)),
        );
        if !rc.window.overlaps(g_start, g_end) {
            wr.summary.cut += 1;
            return Ok(());
        }
        let (g_start, g_end) = rc.window.clip(g_start, g_end);
        let start = wr.ts(lane, g_start);
        let w = lane.writer;
        let nil = ptr::null_mut();
        // SAFETY (every FFI call below): `w` is a live event writer of the open archive, the
        // attribute list may be null, and all other arguments are plain integers.
        let code = unsafe { ffi::OTF2_EvtWriter_Enter(w, nil, start, region) };
        wr.done(lane, code, "Enter")?;
        let comm = rc.comms.get(&c.comm).copied();
        let tag = |t: i32| t.max(0) as u32;
        match class {
            FuncClass::Send | FuncClass::SendRecv if c.peer >= 0 => {
                if let Some(comm) = comm {
                    let code = unsafe {
                        ffi::OTF2_EvtWriter_MpiSend(
                            w,
                            nil,
                            start,
                            c.peer as u32,
                            comm,
                            tag(c.tag),
                            c.bytes,
                        )
                    };
                    wr.done(lane, code, "MpiSend")?;
                    wr.summary.sends += 1;
                }
            }
            FuncClass::Isend if c.peer >= 0 && c.request != 0 => {
                if let Some(comm) = comm {
                    let code = unsafe {
                        ffi::OTF2_EvtWriter_MpiIsend(
                            w,
                            nil,
                            start,
                            c.peer as u32,
                            comm,
                            tag(c.tag),
                            c.bytes,
                            c.request,
                        )
                    };
                    wr.done(lane, code, "MpiIsend")?;
                    wr.summary.sends += 1;
                    rc.open.insert(c.request, Open::Isend);
                }
            }
            FuncClass::Irecv if c.peer != PROC_NULL && c.request != 0 => {
                if let Some(comm) = comm {
                    let code =
                        unsafe { ffi::OTF2_EvtWriter_MpiIrecvRequest(w, nil, start, c.request) };
                    wr.done(lane, code, "MpiIrecvRequest")?;
                    rc.open.insert(c.request, Open::Irecv { comm });
                }
            }
            FuncClass::Collective(_) if comm.is_some() && collective_op(&name).is_some() => {
                let code = unsafe { ffi::OTF2_EvtWriter_MpiCollectiveBegin(w, nil, start) };
                wr.done(lane, code, "MpiCollectiveBegin")?;
            }
            _ => {}
        }
        let special = rc.special.get(&c.func).copied();
        match special {
            Some(Special::Rma(kind)) => {
                let win = rc.rma_window(kind, c, lane);
                let mut done = |code, what| wr.done(lane, code, what);
                let mut out = Out { w, done: &mut done };
                rc.rma.at_start(kind, c, win, start, &mut out)?;
            }
            Some(Special::Io(kind)) => {
                let handle = rc.io_handle;
                let mut done = |code, what| wr.done(lane, code, what);
                let mut out = Out { w, done: &mut done };
                rc.io.at_start(kind, c, handle, start, &mut out)?;
            }
            Some(Special::CommCreator) => {
                if let Some(&parent) = rc.comms.get(&c.comm) {
                    for &(id, win) in &lane.call_defs {
                        if let (false, Some(&child)) = (win, rc.comms.get(&id))
                            && id != c.comm
                        {
                            rc.parents.push((child, parent));
                        }
                    }
                }
            }
            None => {}
        }
        let end = wr.ts(lane, g_end);
        match class {
            FuncClass::Recv | FuncClass::SendRecv => {
                if let (Some(comm), Some(status)) = (
                    comm,
                    completions.iter().find(|s| s.request == 0 && s.source >= 0),
                ) {
                    let code = unsafe {
                        ffi::OTF2_EvtWriter_MpiRecv(
                            w,
                            nil,
                            end,
                            status.source as u32,
                            comm,
                            tag(status.tag),
                            status.bytes,
                        )
                    };
                    wr.done(lane, code, "MpiRecv")?;
                    wr.summary.receives += 1;
                }
            }
            FuncClass::Completion => {
                for done in completions.iter().filter(|d| d.request != 0) {
                    match rc.open.remove(&done.request) {
                        Some(Open::Isend) => {
                            let code = unsafe {
                                ffi::OTF2_EvtWriter_MpiIsendComplete(w, nil, end, done.request)
                            };
                            wr.done(lane, code, "MpiIsendComplete")?;
                        }
                        Some(Open::Irecv { .. }) if done.cancelled => {
                            let code = unsafe {
                                ffi::OTF2_EvtWriter_MpiRequestCancelled(w, nil, end, done.request)
                            };
                            wr.done(lane, code, "MpiRequestCancelled")?;
                        }
                        Some(Open::Irecv { comm }) if done.source >= 0 => {
                            let code = unsafe {
                                ffi::OTF2_EvtWriter_MpiIrecv(
                                    w,
                                    nil,
                                    end,
                                    done.source as u32,
                                    comm,
                                    tag(done.tag),
                                    done.bytes,
                                    done.request,
                                )
                            };
                            wr.done(lane, code, "MpiIrecv")?;
                            wr.summary.receives += 1;
                        }
                        None => {
                            let handle = rc.io_handle;
                            let bytes = done.bytes;
                            let mut record = |code, what| wr.done(lane, code, what);
                            let mut out = Out {
                                w,
                                done: &mut record,
                            };
                            if !rc.rma.request_done(done.request, end, &mut out)? {
                                rc.io
                                    .request_done(done.request, bytes, handle, end, &mut out)?;
                            }
                        }
                        // Receives from MPI_PROC_NULL.
                        _ => {}
                    }
                }
            }
            FuncClass::Collective(_) => {
                if let (Some(comm), Some(op)) = (comm, collective_op(&name)) {
                    let root = if c.root >= 0 {
                        c.root as u32
                    } else {
                        ffi::OTF2_COLLECTIVE_ROOT_NONE
                    };
                    let code = unsafe {
                        ffi::OTF2_EvtWriter_MpiCollectiveEnd(
                            w,
                            nil,
                            end,
                            op,
                            comm,
                            root,
                            c.bytes,
                            c.recv_bytes,
                        )
                    };
                    wr.done(lane, code, "MpiCollectiveEnd")?;
                    wr.summary.collectives += 1;
                }
            }
            _ => {}
        }
        match special {
            Some(Special::Rma(kind)) => {
                let win = rc.rma_window(kind, c, lane);
                let events = rc.window_events(win);
                let mut done = |code, what| wr.done(lane, code, what);
                let mut out = Out { w, done: &mut done };
                rc.rma.at_end(kind, c, win, events, end, &mut out)?;
            }
            Some(Special::Io(kind)) => {
                let handle = rc.io_handle;
                let mut done = |code, what| wr.done(lane, code, what);
                let mut out = Out { w, done: &mut done };
                rc.io.at_end(kind, c, handle, end, &mut out)?;
            }
            _ => {}
        }
        let code = unsafe { ffi::OTF2_EvtWriter_Leave(w, nil, end, region) };
        wr.done(lane, code, "Leave")
    }

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

    pub fn export(
        trace: &Trace,
        out: &Path,
        window: &trace::window::Window,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Otf2Summary, ExportError> {
        let metas = scan(trace)?;
        remove_old_archive(out)?;
        let total: u64 = metas.iter().map(|m| m.events).sum();
        let mut comm_defs = CommDefs::new(&metas, trace.world_size);
        let tables: Vec<HashMap<u16, (String, FuncClass)>> =
            metas.iter().map(function_table).collect();
        let mut strings = Strings::default();
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
        let name = c"traces";
        let latest = Box::new(Cell::new(0u64));
        // SAFETY: both strings are NUL-terminated and outlive the call; the constants are
        // valid enum values of this OTF2 version.
        let ptr = unsafe {
            ffi::OTF2_Archive_Open(
                path.as_ptr(),
                name.as_ptr(),
                ffi::OTF2_FILEMODE_WRITE,
                1 << 20,
                4 << 20,
                ffi::OTF2_SUBSTRATE_POSIX,
                ffi::OTF2_COMPRESSION_NONE,
            )
        };
        if ptr.is_null() {
            return Err(ExportError::Other(format!(
                "OTF2: could not create an archive in {}",
                out.display()
            )));
        }
        let archive = Archive { ptr, latest };
        let user = &*archive.latest as *const Cell<u64> as *mut c_void;
        // SAFETY: the callbacks are a static; `user` points into `archive.latest`, which lives as
        // long as the archive. Serial collective callbacks are right for one writing process.
        unsafe {
            check(
                ffi::OTF2_Archive_SetFlushCallbacks(archive.ptr, &FLUSH_CALLBACKS, user),
                "setting the flush callbacks",
            )?;
            check(
                ffi::OTF2_Archive_SetSerialCollectiveCallbacks(archive.ptr),
                "setting the collective callbacks",
            )?;
            let creator = CString::new(format!("evenflush {}", env!("CARGO_PKG_VERSION")))
                .unwrap_or_default();
            check(
                ffi::OTF2_Archive_SetCreator(archive.ptr, creator.as_ptr()),
                "setting the creator",
            )?;
            check(
                ffi::OTF2_Archive_OpenEvtFiles(archive.ptr),
                "opening the event files",
            )?;
        }

        let mut wr = Writer {
            latest: &archive.latest,
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
            if !window.has_rank(rank) {
                // Defined but empty: the definitions (location groups, the MPI locations group,
                // communicators) then stay those of the whole run.
                for &stream in &meta.streams {
                    let loc = location_id(rank, stream);
                    // SAFETY: the archive is open with its event files open; the writer is
                    // closed once, right away.
                    check(
                        unsafe {
                            ffi::OTF2_Archive_CloseEvtWriter(
                                archive.ptr,
                                ffi::OTF2_Archive_GetEvtWriter(archive.ptr, loc),
                            )
                        },
                        "closing an event writer",
                    )?;
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
                        let (lane, cur) = lanes.entry(stream).or_insert_with(|| {
                            let loc = location_id(rank, stream);
                            // SAFETY: the archive is open with its event files open.
                            let writer =
                                unsafe { ffi::OTF2_Archive_GetEvtWriter(archive.ptr, loc) };
                            (
                                Lane {
                                    writer,
                                    last: 0,
                                    events: 0,
                                    pending: None,
                                    new_defs: Vec::new(),
                                    call_defs: Vec::new(),
                                },
                                MapCursor::default(),
                            )
                        });
                        if lane.writer.is_null() {
                            failed = Some(ExportError::Other(format!(
                                "OTF2: no event writer for rank {rank} thread {stream}"
                            )));
                            return;
                        }
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
                                let w = lane.writer;
                                let (ga, gb) = (
                                    map.absolute(map.global_ns(s.start, cur)),
                                    map.absolute(map.global_ns(s.end, cur)),
                                );
                                if !window.overlaps(ga, gb) {
                                    wr.summary.cut += 1;
                                    return;
                                }
                                let (ga, gb) = window.clip(ga, gb);
                                let a = wr.ts(lane, ga);
                                // SAFETY: live writer, null attribute list, plain values.
                                let code = unsafe {
                                    ffi::OTF2_EvtWriter_MeasurementOnOff(
                                        w,
                                        ptr::null_mut(),
                                        a,
                                        ffi::OTF2_MEASUREMENT_OFF,
                                    )
                                };
                                if let Err(err) = wr.done(lane, code, "MeasurementOnOff") {
                                    failed = Some(err);
                                    return;
                                }
                                if s.flushed && s.write_ns > 0 {
                                    // The write comes first in a flushing suspension; Score-P marks
                                    // its own flushes the same way, so Scalasca-family tools know
                                    // the interval.
                                    let stop =
                                        wr.ts(lane, ga.saturating_add(s.write_ns).min(window.to));
                                    // SAFETY: live writer, null attribute list, plain values.
                                    let code = unsafe {
                                        ffi::OTF2_EvtWriter_BufferFlush(w, ptr::null_mut(), a, stop)
                                    };
                                    if let Err(err) = wr.done(lane, code, "BufferFlush") {
                                        failed = Some(err);
                                        return;
                                    }
                                    wr.summary.buffer_flushes += 1;
                                }
                                let b = wr.ts(lane, gb);
                                // SAFETY: as above.
                                let code = unsafe {
                                    ffi::OTF2_EvtWriter_MeasurementOnOff(
                                        w,
                                        ptr::null_mut(),
                                        b,
                                        ffi::OTF2_MEASUREMENT_ON,
                                    )
                                };
                                if let Err(err) = wr.done(lane, code, "MeasurementOnOff") {
                                    failed = Some(err);
                                }
                                wr.summary.suspensions += 1;
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
                // SAFETY: the writer belongs to this archive and is closed once.
                check(
                    unsafe { ffi::OTF2_Archive_CloseEvtWriter(archive.ptr, lane.writer) },
                    "closing an event writer",
                )?;
                locations.push((rank, stream, location_id(rank, stream), lane.events));
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
        // SAFETY: every event writer is closed.
        check(
            unsafe { ffi::OTF2_Archive_CloseEvtFiles(archive.ptr) },
            "closing the event files",
        )?;

        // Each location needs its (here empty) local definitions file.
        // SAFETY: plain calls on the open archive; each def writer is closed right away.
        unsafe {
            check(
                ffi::OTF2_Archive_OpenDefFiles(archive.ptr),
                "opening the definition files",
            )?;
            for &(_, _, loc, _) in &locations {
                let dw = ffi::OTF2_Archive_GetDefWriter(archive.ptr, loc);
                if dw.is_null() {
                    return Err(ExportError::Other("OTF2: no definition writer".into()));
                }
                check(
                    ffi::OTF2_Archive_CloseDefWriter(archive.ptr, dw),
                    "closing a definition writer",
                )?;
            }
            check(
                ffi::OTF2_Archive_CloseDefFiles(archive.ptr),
                "closing the definition files",
            )?;
        }

        // Global definitions, in the order OTF2 requires.
        let mpi = strings.id("MPI");
        let machine = strings.id("machine");
        let region_ids: Vec<(u32, u8)> = region_names
            .iter()
            .map(|(n, class)| (strings.id(n), region_role(*class, n)))
            .collect();
        let rank_names: Vec<u32> = metas
            .iter()
            .map(|m| strings.id(&format!("rank {}", m.rank)))
            .collect();
        let loc_names: Vec<u32> = locations
            .iter()
            .map(|(r, s, _, _)| strings.id(&format!("rank {r} thread {s}")))
            .collect();
        let empty = strings.id("");
        for (child, parent) in parents {
            comm_defs.set_parent(child, parent);
        }
        let comm_names: Vec<String> = comm_defs.names().map(str::to_string).collect();
        for n in &comm_names {
            strings.id(n);
        }
        // Score-P's templates for the names of unnamed communicators and windows.
        let comm_template = strings.id("Comm ${id}");
        let win_template = strings.id("Win ${id}");
        let io_names = any_io.then(|| {
            (
                strings.id("MPI-IO"),
                strings.id("MPI-IO files (names are not in the trace)"),
            )
        });
        let handle_names: Vec<u32> = io_handles
            .iter()
            .map(|(r, _)| strings.id(&format!("MPI-IO files of rank {r}")))
            .collect();
        let gw = {
            // SAFETY: the archive is open; the writer lives until the archive is closed.
            let gw = unsafe { ffi::OTF2_Archive_GetGlobalDefWriter(archive.ptr) };
            if gw.is_null() {
                return Err(ExportError::Other(
                    "OTF2: no global definition writer".into(),
                ));
            }
            gw
        };
        let (offset, length) = if wr.min_ts == u64::MAX {
            (0, 1)
        } else {
            (wr.min_ts, wr.max_ts - wr.min_ts + 1)
        };
        // SAFETY: `gw` is live; string pointers are NUL-terminated and outlive each call; member
        // arrays are valid for the lengths passed.
        unsafe {
            check(
                ffi::OTF2_GlobalDefWriter_WriteClockProperties(
                    gw,
                    1_000_000_000,
                    offset,
                    length,
                    ffi::OTF2_UNDEFINED_TIMESTAMP,
                ),
                "WriteClockProperties",
            )?;
            for (id, s) in strings.list.iter().enumerate() {
                check(
                    ffi::OTF2_GlobalDefWriter_WriteString(gw, id as u32, s.as_ptr()),
                    "WriteString",
                )?;
            }
            check(
                ffi::OTF2_GlobalDefWriter_WriteParadigm(
                    gw,
                    ffi::OTF2_PARADIGM_MPI,
                    mpi,
                    ffi::OTF2_PARADIGM_CLASS_PROCESS,
                ),
                "WriteParadigm",
            )?;
            for (property, value) in [
                (
                    ffi::OTF2_PARADIGM_PROPERTY_COMM_NAME_TEMPLATE,
                    comm_template,
                ),
                (
                    ffi::OTF2_PARADIGM_PROPERTY_RMA_WIN_NAME_TEMPLATE,
                    win_template,
                ),
            ] {
                check(
                    ffi::OTF2_GlobalDefWriter_WriteParadigmProperty(
                        gw,
                        ffi::OTF2_PARADIGM_MPI,
                        property,
                        ffi::OTF2_TYPE_STRING,
                        ffi::OTF2_AttributeValue { string_ref: value },
                    ),
                    "WriteParadigmProperty",
                )?;
            }
            if let Some((paradigm, _)) = io_names {
                check(
                    ffi::OTF2_GlobalDefWriter_WriteIoParadigm(
                        gw,
                        io::PARADIGM,
                        paradigm,
                        paradigm,
                        ffi::OTF2_IO_PARADIGM_CLASS_PARALLEL,
                        ffi::OTF2_IO_PARADIGM_FLAG_NONE,
                        0,
                        ptr::null(),
                        ptr::null(),
                        ptr::null(),
                    ),
                    "WriteIoParadigm",
                )?;
            }
            for (i, &(name, role)) in region_ids.iter().enumerate() {
                check(
                    ffi::OTF2_GlobalDefWriter_WriteRegion(
                        gw,
                        i as u32,
                        name,
                        name,
                        empty,
                        role,
                        ffi::OTF2_PARADIGM_MPI,
                        ffi::OTF2_REGION_FLAG_NONE,
                        empty,
                        0,
                        0,
                    ),
                    "WriteRegion",
                )?;
            }
            check(
                ffi::OTF2_GlobalDefWriter_WriteSystemTreeNode(
                    gw,
                    0,
                    machine,
                    machine,
                    ffi::OTF2_UNDEFINED_SYSTEM_TREE_NODE,
                ),
                "WriteSystemTreeNode",
            )?;
            for (m, &name) in metas.iter().zip(&rank_names) {
                check(
                    ffi::OTF2_GlobalDefWriter_WriteLocationGroup(
                        gw,
                        m.rank,
                        name,
                        ffi::OTF2_LOCATION_GROUP_TYPE_PROCESS,
                        0,
                        ffi::OTF2_UNDEFINED_LOCATION_GROUP,
                    ),
                    "WriteLocationGroup",
                )?;
            }
            for (&(rank, _, loc, events), &name) in locations.iter().zip(&loc_names) {
                check(
                    ffi::OTF2_GlobalDefWriter_WriteLocation(
                        gw,
                        loc,
                        name,
                        ffi::OTF2_LOCATION_TYPE_CPU_THREAD,
                        events,
                        rank,
                    ),
                    "WriteLocation",
                )?;
            }
            // The MPI ranks' locations, indexed by world rank: each rank's first stream.
            let mut by_rank: Vec<u64> = Vec::new();
            for r in 0..trace.world_size {
                let loc = locations
                    .iter()
                    .filter(|l| l.0 == r)
                    .map(|l| l.2)
                    .min()
                    .unwrap_or_else(|| location_id(r, 0));
                by_rank.push(loc);
            }
            let name = |n: &str| strings.ids.get(n).copied().unwrap_or(empty);
            comm_defs.write(gw, &by_rank, &name, &check)?;
            if let Some((_, file)) = io_names {
                check(
                    ffi::OTF2_GlobalDefWriter_WriteIoRegularFile(gw, io::FILE, file, 0),
                    "WriteIoRegularFile",
                )?;
                for (&(rank, comm_self), &handle_name) in io_handles.iter().zip(&handle_names) {
                    check(
                        ffi::OTF2_GlobalDefWriter_WriteIoHandle(
                            gw,
                            rank,
                            handle_name,
                            io::FILE,
                            io::PARADIGM,
                            ffi::OTF2_IO_HANDLE_FLAG_NONE,
                            comm_self.unwrap_or(ffi::OTF2_UNDEFINED_COMM),
                            ffi::OTF2_UNDEFINED_IO_HANDLE,
                        ),
                        "WriteIoHandle",
                    )?;
                }
            }
        }
        wr.summary.locations = locations.len() as u64;
        let summary = std::mem::take(&mut wr.summary);
        drop(wr);
        archive.close()?;
        progress(total, total);
        Ok(summary)
    }

    /// Location ids: rank in the high bits, stream in the low 16 (streams are thread indices).
    fn location_id(rank: u32, stream: u32) -> u64 {
        (u64::from(rank) << 16) | u64::from(stream & 0xffff)
    }
}
