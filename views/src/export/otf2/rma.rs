//! One-sided communication in the OTF2 export: the RMA records OTF2 3.0 has for what the trace
//! records of MPI's window calls (function, window, target rank, bytes, request).
//!
//! - `MPI_Win_create`/`_allocate`/`_allocate_shared`/`_create_dynamic`: `RmaCollectiveBegin`,
//!   `RmaWinCreate`, `RmaCollectiveEnd` (handle creation, with allocation for the allocating
//!   ones); `MPI_Win_free` likewise with `RmaWinDestroy`. The create/destroy records are written
//!   only for windows whose creation every rank recorded, and their `RmaWin` definition says so.
//! - `MPI_Put`/`MPI_Rput`: `RmaPut`; `MPI_Get`/`MPI_Rget`: `RmaGet`; the accumulating and atomic
//!   calls `RmaAtomic` (accumulate; fetch-and-accumulate for `Get_accumulate` and `Fetch_and_op`;
//!   compare-and-swap). The trace has one size per call (origin count × type): it is the bytes
//!   sent, and for the fetching ones the bytes received too. Target `MPI_PROC_NULL` moves nothing
//!   and gets no record.
//! - Completion, as MPI defines it and Score-P records it: none of these calls completes its
//!   operation before it returns (the origin buffer is reusable only after a synchronisation), so
//!   every operation gets `RmaOpCompleteNonBlocking` (local completion) and `RmaOpCompleteRemote`
//!   at the end of the call that completes it: `MPI_Win_fence`, `MPI_Win_unlock` of its target,
//!   `MPI_Win_unlock_all`, `MPI_Win_flush` of its target or `_flush_all`, `MPI_Win_complete`;
//!   `MPI_Win_flush_local(_all)` completes locally only; the `Wait`/`Test` that completes the
//!   request of a request-based call completes it locally.
//! - `MPI_Win_fence`: `RmaCollectiveBegin`/`RmaCollectiveEnd` (a barrier synchronising processes
//!   and memory). `MPI_Win_lock`: `RmaRequestLock` of its target (MPI may grant the lock lazily, so
//!   no `RmaAcquireLock`), exclusive, since the trace does not record the lock type;
//!   `MPI_Win_lock_all`: a shared lock of every process; the unlocks `RmaReleaseLock`.
//! - Not written: `RmaGroupSync` for the post/start/complete/wait calls (their groups are not in
//!   the trace), `RmaSync` for `MPI_Win_sync`, attach/detach. Their regions are there.

use std::collections::HashMap;

use format::MpiCall;

use super::ffi;
use super::location::Out;
use crate::export::ExportError;

/// What an RMA function does, by name (the `_c` large-count variants like their base).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RmaCall {
    Create { allocate: bool },
    Free,
    Put,
    Get,
    Atomic { kind: u8, fetches: bool },
    Fence,
    Lock,
    LockAll,
    Unlock,
    UnlockAll,
    Flush { local: bool, all: bool },
    Complete,
}

impl RmaCall {
    pub fn of(name: &str) -> Option<RmaCall> {
        let base = name.strip_prefix("MPI_")?.to_ascii_lowercase();
        let base = base.strip_suffix("_c").unwrap_or(&base);
        Some(match base {
            "win_create" | "win_create_dynamic" => RmaCall::Create { allocate: false },
            "win_allocate" | "win_allocate_shared" => RmaCall::Create { allocate: true },
            "win_free" => RmaCall::Free,
            "put" | "rput" => RmaCall::Put,
            "get" | "rget" => RmaCall::Get,
            "accumulate" | "raccumulate" => RmaCall::Atomic {
                kind: ffi::OTF2_RMA_ATOMIC_TYPE_ACCUMULATE,
                fetches: false,
            },
            "get_accumulate" | "rget_accumulate" | "fetch_and_op" => RmaCall::Atomic {
                kind: ffi::OTF2_RMA_ATOMIC_TYPE_FETCH_AND_ACCUMULATE,
                fetches: true,
            },
            "compare_and_swap" => RmaCall::Atomic {
                kind: ffi::OTF2_RMA_ATOMIC_TYPE_COMPARE_AND_SWAP,
                fetches: true,
            },
            "win_fence" => RmaCall::Fence,
            "win_lock" => RmaCall::Lock,
            "win_lock_all" => RmaCall::LockAll,
            "win_unlock" => RmaCall::Unlock,
            "win_unlock_all" => RmaCall::UnlockAll,
            "win_flush" => RmaCall::Flush {
                local: false,
                all: false,
            },
            "win_flush_all" => RmaCall::Flush {
                local: false,
                all: true,
            },
            "win_flush_local" => RmaCall::Flush {
                local: true,
                all: false,
            },
            "win_flush_local_all" => RmaCall::Flush {
                local: true,
                all: true,
            },
            "win_complete" => RmaCall::Complete,
            _ => return None,
        })
    }
}

/// An operation issued and not yet complete at its origin and target.
struct Pending {
    win: u32,
    target: u32,
    id: u64,
    local_done: bool,
}

/// One rank's one-sided state.
#[derive(Default)]
pub(super) struct RmaState {
    next_id: u64,
    pending: Vec<Pending>,
    /// Request of a request-based operation -> its matching id.
    requests: HashMap<u64, u64>,
    /// Windows created with memory allocated by MPI (their destruction deallocates).
    allocated: HashMap<u32, bool>,
    /// `RmaPut`, `RmaGet` and `RmaAtomic` records written.
    pub operations: u64,
}

impl RmaState {
    /// Records at the start of `c`, right after its `Enter`. `win`: the global window the call
    /// works on (for a creating call, the one it created), if it has a definition; `events`:
    /// whether that window has create/destroy records.
    pub fn at_start(
        &mut self,
        kind: RmaCall,
        c: &MpiCall,
        win: Option<u32>,
        time: u64,
        out: &mut Out,
    ) -> Result<(), ExportError> {
        let Some(win) = win else { return Ok(()) };
        let w = out.w;
        match kind {
            RmaCall::Create { .. } | RmaCall::Free | RmaCall::Fence => {
                let code = w.rma_collective_begin(time);
                (out.done)(code, "RmaCollectiveBegin")
            }
            RmaCall::Put | RmaCall::Get | RmaCall::Atomic { .. } if c.peer >= 0 => {
                let id = self.next_id;
                self.next_id += 1;
                let target = c.peer as u32;
                let code = match kind {
                    RmaCall::Put => w.rma_put(time, win, target, c.bytes, id),
                    RmaCall::Get => w.rma_get(time, win, target, c.bytes, id),
                    RmaCall::Atomic { kind, fetches } => {
                        let received = if fetches { c.bytes } else { 0 };
                        w.rma_atomic(time, win, target, kind, c.bytes, received, id)
                    }
                    _ => return Ok(()),
                };
                (out.done)(code, "RmaPut/RmaGet/RmaAtomic")?;
                self.operations += 1;
                if c.request != 0 {
                    self.requests.insert(c.request, id);
                }
                self.pending.push(Pending {
                    win,
                    target,
                    id,
                    local_done: false,
                });
                Ok(())
            }
            RmaCall::Lock if c.peer >= 0 => {
                let code =
                    w.rma_request_lock(time, win, c.peer as u32, 0, ffi::OTF2_LOCK_EXCLUSIVE);
                (out.done)(code, "RmaRequestLock")
            }
            RmaCall::LockAll => {
                let code = w.rma_request_lock(
                    time,
                    win,
                    ffi::OTF2_UNDEFINED_UINT32,
                    0,
                    ffi::OTF2_LOCK_SHARED,
                );
                (out.done)(code, "RmaRequestLock")
            }
            _ => Ok(()),
        }
    }

    /// Records at the end of `c`, right before its `Leave`.
    pub fn at_end(
        &mut self,
        kind: RmaCall,
        c: &MpiCall,
        win: Option<u32>,
        events: bool,
        time: u64,
        out: &mut Out,
    ) -> Result<(), ExportError> {
        let Some(win) = win else { return Ok(()) };
        let w = out.w;
        let target = (c.peer >= 0).then_some(c.peer as u32);
        match kind {
            RmaCall::Create { allocate } => {
                self.allocated.insert(win, allocate);
                if events {
                    let code = w.rma_win_create(time, win);
                    (out.done)(code, "RmaWinCreate")?;
                }
                let op = if allocate {
                    ffi::OTF2_COLLECTIVE_OP_CREATE_HANDLE_AND_ALLOCATE
                } else {
                    ffi::OTF2_COLLECTIVE_OP_CREATE_HANDLE
                };
                collective_end(out, time, op, ffi::OTF2_RMA_SYNC_LEVEL_NONE, win)
            }
            RmaCall::Free => {
                // A correct program has nothing outstanding on a window it frees.
                self.pending.retain(|p| p.win != win);
                if events {
                    let code = w.rma_win_destroy(time, win);
                    (out.done)(code, "RmaWinDestroy")?;
                }
                let op = if self.allocated.remove(&win).unwrap_or(false) {
                    ffi::OTF2_COLLECTIVE_OP_DESTROY_HANDLE_AND_DEALLOCATE
                } else {
                    ffi::OTF2_COLLECTIVE_OP_DESTROY_HANDLE
                };
                collective_end(out, time, op, ffi::OTF2_RMA_SYNC_LEVEL_NONE, win)
            }
            RmaCall::Fence => {
                self.complete(win, None, true, time, out)?;
                collective_end(
                    out,
                    time,
                    ffi::OTF2_COLLECTIVE_OP_BARRIER,
                    ffi::OTF2_RMA_SYNC_LEVEL_PROCESS | ffi::OTF2_RMA_SYNC_LEVEL_MEMORY,
                    win,
                )
            }
            RmaCall::Unlock => {
                let Some(target) = target else { return Ok(()) };
                self.complete(win, Some(target), true, time, out)?;
                let code = w.rma_release_lock(time, win, target, 0);
                (out.done)(code, "RmaReleaseLock")
            }
            RmaCall::UnlockAll => {
                self.complete(win, None, true, time, out)?;
                let code = w.rma_release_lock(time, win, ffi::OTF2_UNDEFINED_UINT32, 0);
                (out.done)(code, "RmaReleaseLock")
            }
            RmaCall::Flush { local, all } => {
                if !all && target.is_none() {
                    return Ok(());
                }
                self.complete(win, if all { None } else { target }, !local, time, out)
            }
            RmaCall::Complete => self.complete(win, None, true, time, out),
            _ => Ok(()),
        }
    }

    /// The `Wait`/`Test` completing `request` ended at `time`: if the request is a request-based
    /// RMA operation's, its local completion. Returns whether it was one.
    pub fn request_done(
        &mut self,
        request: u64,
        time: u64,
        out: &mut Out,
    ) -> Result<bool, ExportError> {
        let Some(id) = self.requests.remove(&request) else {
            return Ok(false);
        };
        if let Some(p) = self.pending.iter_mut().find(|p| p.id == id)
            && !p.local_done
        {
            p.local_done = true;
            let code = out.w.rma_op_complete_non_blocking(time, p.win, id);
            (out.done)(code, "RmaOpCompleteNonBlocking")?;
        }
        Ok(true)
    }

    /// Completes the operations on `win` (to `target`, or all): locally, and at the target too
    /// when `remote`.
    fn complete(
        &mut self,
        win: u32,
        target: Option<u32>,
        remote: bool,
        time: u64,
        out: &mut Out,
    ) -> Result<(), ExportError> {
        let w = out.w;
        let mut i = 0;
        while i < self.pending.len() {
            let p = &mut self.pending[i];
            if p.win != win || target.is_some_and(|t| t != p.target) {
                i += 1;
                continue;
            }
            if !p.local_done {
                p.local_done = true;
                let code = w.rma_op_complete_non_blocking(time, win, p.id);
                (out.done)(code, "RmaOpCompleteNonBlocking")?;
            }
            if remote {
                let id = p.id;
                let code = w.rma_op_complete_remote(time, win, id);
                (out.done)(code, "RmaOpCompleteRemote")?;
                self.pending.remove(i);
                self.requests.retain(|_, r| *r != id);
            } else {
                i += 1;
            }
        }
        Ok(())
    }
}

fn collective_end(
    out: &mut Out,
    time: u64,
    op: u8,
    sync: u32,
    win: u32,
) -> Result<(), ExportError> {
    let code = out
        .w
        .rma_collective_end(time, op, sync, win, ffi::OTF2_COLLECTIVE_ROOT_NONE, 0, 0);
    (out.done)(code, "RmaCollectiveEnd")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_classify() {
        assert_eq!(RmaCall::of("MPI_Put_c"), Some(RmaCall::Put));
        assert_eq!(RmaCall::of("MPI_Rget"), Some(RmaCall::Get));
        assert_eq!(
            RmaCall::of("MPI_Win_allocate_shared"),
            Some(RmaCall::Create { allocate: true })
        );
        assert_eq!(
            RmaCall::of("MPI_Win_flush_local_all"),
            Some(RmaCall::Flush {
                local: true,
                all: true
            })
        );
        assert!(matches!(
            RmaCall::of("MPI_Fetch_and_op"),
            Some(RmaCall::Atomic { fetches: true, .. })
        ));
        assert_eq!(RmaCall::of("MPI_Win_post"), None);
        assert_eq!(RmaCall::of("MPI_Send"), None);
    }
}
