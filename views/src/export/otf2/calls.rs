//! One MPI call as OTF2 records: its region's `Enter`/`Leave` and, between them, the
//! point-to-point, collective, one-sided ([`super::rma`]) and I/O ([`super::io`]) records it
//! stands for, with the per-rank state that pairs requests with their completions.

use std::collections::HashMap;

use format::requests::{MatchedProbes, PersistentRequests, Probe};
use format::{ANY_SOURCE, ANY_TAG, Completion, MpiCall, NO_REQUEST, PROC_NULL};

use super::comms::CommDefs;
use super::ffi;
use super::io::{IoCall, IoState};
use super::location::{Lane, Out, Writer};
use super::rma::{RmaCall, RmaState};
use crate::export::ExportError;
use trace::clock::MapCursor;
use trace::clock::TimeMap;
use trace::funcs::Deferred;
use trace::funcs::FuncClass;

pub(super) const UNNAMED: &str = "MPI function without a name in the trace";

pub(super) fn collective_op(name: &str) -> Option<u8> {
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
pub(super) enum Special {
    Rma(RmaCall),
    Io(IoCall),
    /// Creates a communicator from the one its call names: that one is the new one's parent.
    CommCreator,
}

impl Special {
    pub fn of(name: &str) -> Option<Special> {
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
pub(super) enum Open {
    Isend,
    Irecv { comm: u32 },
}

pub(super) struct RankCtx<'a> {
    pub funcs: &'a HashMap<u16, (String, FuncClass)>,
    pub special: HashMap<u16, Special>,
    pub deferred: HashMap<u16, Deferred>,
    pub persistent: PersistentRequests,
    /// With the probe's local communicator.
    pub probes: MatchedProbes<u32>,
    pub regions: &'a HashMap<String, u32>,
    pub comms: &'a HashMap<u32, u32>,
    pub defs: &'a CommDefs,
    pub slot: usize,
    /// The rank's I/O handle.
    pub io_handle: u32,
    pub open: HashMap<u64, Open>,
    pub window: &'a trace::window::Window,
    pub rma: RmaState,
    pub io: IoState,
    /// (child, parent) communicators, global ids.
    pub parents: Vec<(u32, u32)>,
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
pub(super) fn write_call(
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
    let start = wr.ts(&mut lane.written, g_start);
    let w = &lane.writer;
    let code = w.enter(start, region);
    wr.done(&mut lane.written, code, "Enter")?;
    let comm = rc.comms.get(&c.comm).copied();
    let tag = |t: i32| t.max(0) as u32;
    match class {
        FuncClass::Send | FuncClass::SendRecv if c.peer >= 0 => {
            if let Some(comm) = comm {
                let code = w.mpi_send(start, c.peer as u32, comm, tag(c.tag), c.bytes);
                wr.done(&mut lane.written, code, "MpiSend")?;
                wr.summary.sends += 1;
            }
        }
        FuncClass::Isend if c.peer >= 0 && c.request != 0 => {
            if let Some(comm) = comm {
                let code = w.mpi_isend(start, c.peer as u32, comm, tag(c.tag), c.bytes, c.request);
                wr.done(&mut lane.written, code, "MpiIsend")?;
                wr.summary.sends += 1;
                rc.open.insert(c.request, Open::Isend);
            }
        }
        FuncClass::Irecv if c.peer != PROC_NULL && c.request != 0 => {
            if let Some(comm) = comm {
                let code = w.mpi_irecv_request(start, c.request);
                wr.done(&mut lane.written, code, "MpiIrecvRequest")?;
                rc.open.insert(c.request, Open::Irecv { comm });
            }
        }
        FuncClass::Collective(_) if comm.is_some() && collective_op(&name).is_some() => {
            let code = w.mpi_collective_begin(start);
            wr.done(&mut lane.written, code, "MpiCollectiveBegin")?;
        }
        _ => {}
    }
    let special = rc.special.get(&c.func).copied();
    match special {
        Some(Special::Rma(kind)) => {
            let win = rc.rma_window(kind, c, lane);
            let mut done = |code, what| wr.done(&mut lane.written, code, what);
            let mut out = Out { w, done: &mut done };
            rc.rma.at_start(kind, c, win, start, &mut out)?;
        }
        Some(Special::Io(kind)) => {
            let handle = rc.io_handle;
            let mut done = |code, what| wr.done(&mut lane.written, code, what);
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
    let end = wr.ts(&mut lane.written, g_end);
    match class {
        FuncClass::Recv | FuncClass::SendRecv => {
            if let (Some(comm), Some(status)) = (
                comm,
                completions.iter().find(|s| s.request == 0 && s.source >= 0),
            ) {
                let code = w.mpi_recv(
                    end,
                    status.source as u32,
                    comm,
                    tag(status.tag),
                    status.bytes,
                );
                wr.done(&mut lane.written, code, "MpiRecv")?;
                wr.summary.receives += 1;
            }
        }
        FuncClass::Completion => {
            for done in completions.iter().filter(|d| d.request != 0) {
                match rc.open.remove(&done.request) {
                    Some(Open::Isend) => {
                        let code = w.mpi_isend_complete(end, done.request);
                        wr.done(&mut lane.written, code, "MpiIsendComplete")?;
                    }
                    Some(Open::Irecv { .. }) if done.cancelled => {
                        let code = w.mpi_request_cancelled(end, done.request);
                        wr.done(&mut lane.written, code, "MpiRequestCancelled")?;
                    }
                    Some(Open::Irecv { comm }) if done.source >= 0 => {
                        let code = w.mpi_irecv(
                            end,
                            done.source as u32,
                            comm,
                            tag(done.tag),
                            done.bytes,
                            done.request,
                        );
                        wr.done(&mut lane.written, code, "MpiIrecv")?;
                        wr.summary.receives += 1;
                    }
                    None => {
                        let handle = rc.io_handle;
                        let bytes = done.bytes;
                        let mut record = |code, what| wr.done(&mut lane.written, code, what);
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
                let code = w.mpi_collective_end(end, op, comm, root, c.bytes, c.recv_bytes);
                wr.done(&mut lane.written, code, "MpiCollectiveEnd")?;
                wr.summary.collectives += 1;
            }
        }
        _ => {}
    }
    match special {
        Some(Special::Rma(kind)) => {
            let win = rc.rma_window(kind, c, lane);
            let events = rc.window_events(win);
            let mut done = |code, what| wr.done(&mut lane.written, code, what);
            let mut out = Out { w, done: &mut done };
            rc.rma.at_end(kind, c, win, events, end, &mut out)?;
        }
        Some(Special::Io(kind)) => {
            let handle = rc.io_handle;
            let mut done = |code, what| wr.done(&mut lane.written, code, what);
            let mut out = Out { w, done: &mut done };
            rc.io.at_end(kind, c, handle, end, &mut out)?;
        }
        _ => {}
    }
    let code = w.leave(end, region);
    wr.done(&mut lane.written, code, "Leave")
}
