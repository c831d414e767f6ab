//! MPI-IO in the OTF2 export: OTF2's I/O records for the `MPI_File_*` calls, as far as the trace
//! carries them.
//!
//! The trace records of an I/O call its function, its byte count (count × type) and, for the
//! nonblocking ones, its request; not the file handle, nor the file's name (only `MPI_File_open`
//! names a communicator). So one `IoHandle` per rank stands for all the MPI files the rank has
//! open: it is created (`IoCreateHandle`) when the rank's first open file is opened, destroyed when
//! its last is closed, and scoped to `MPI_COMM_SELF` (handles of different ranks are different
//! handles). It refers to one `IoRegularFile` for every MPI file, and the I/O paradigm "MPI-IO".
//! Access mode read-write: the open mode is not recorded either.
//!
//! - Blocking reads and writes: `IoOperationBegin` at the call's start, `IoOperationComplete` at
//!   its end with the requested size as the size done (the status is not recorded). The
//!   collective ones (`_all`, `_ordered`) are flagged collective.
//! - Nonblocking ones: `IoOperationBegin` (nonblocking) at the start, `IoOperationIssued` at the
//!   end, `IoOperationComplete` at the end of the `Wait`/`Test` that completed the request, with
//!   the byte count of its status.
//! - Split collectives: `_begin` as a nonblocking collective operation, completed by the next
//!   `_end` (MPI allows one outstanding split collective per file handle; with one handle per
//!   rank, they are completed in order).
//! - `MPI_File_sync`: a flush operation of 0 bytes. `MPI_File_delete`: `IoDeleteFile`.
//! - An operation with no file open on its rank (the trace began after the open) gets no records;
//!   seeks, views, sizes, hints and atomicity only their regions.

use std::collections::{HashMap, VecDeque};

use format::MpiCall;

use super::ffi;
use super::location::Out;
use crate::export::ExportError;

/// The one I/O paradigm and the one file definition of an archive.
pub(super) const PARADIGM: u8 = 0;
pub(super) const FILE: u32 = 0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Blocking {
    Yes,
    /// Completed by a `Wait`/`Test` of its request.
    Request,
    /// A split collective's `_begin`: completed by the next `_end`.
    SplitBegin,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum IoCall {
    Open,
    Close,
    Delete,
    Sync,
    Op {
        mode: u8,
        collective: bool,
        blocking: Blocking,
    },
    SplitEnd,
}

impl IoCall {
    pub fn of(name: &str) -> Option<IoCall> {
        let lower = name.strip_prefix("MPI_File_")?.to_ascii_lowercase();
        let base = lower.strip_suffix("_c").unwrap_or(&lower);
        match base {
            "open" => return Some(IoCall::Open),
            "close" => return Some(IoCall::Close),
            "delete" => return Some(IoCall::Delete),
            "sync" => return Some(IoCall::Sync),
            _ => {}
        }
        if base.ends_with("_end") {
            return (base.starts_with("read") || base.starts_with("write"))
                .then_some(IoCall::SplitEnd);
        }
        let (blocking, rest) = if let Some(rest) = base.strip_suffix("_begin") {
            (Blocking::SplitBegin, rest)
        } else if let Some(rest) = base
            .strip_prefix('i')
            .filter(|r| r.starts_with("read") || r.starts_with("write"))
        {
            (Blocking::Request, rest)
        } else {
            (Blocking::Yes, base)
        };
        let (mode, variant) = if let Some(v) = rest.strip_prefix("read") {
            (ffi::OTF2_IO_OPERATION_MODE_READ, v)
        } else if let Some(v) = rest.strip_prefix("write") {
            (ffi::OTF2_IO_OPERATION_MODE_WRITE, v)
        } else {
            return None;
        };
        let collective = match variant {
            "" | "_at" | "_shared" => false,
            "_all" | "_at_all" | "_ordered" => true,
            _ => return None,
        };
        Some(IoCall::Op {
            mode,
            collective,
            blocking,
        })
    }
}

/// One rank's MPI-IO state.
#[derive(Default)]
pub(super) struct IoState {
    /// Files open on the rank (its handle is active while this is not 0).
    open_files: u64,
    next_id: u64,
    /// The blocking operation of the call being written.
    in_call: Option<u64>,
    /// Request -> matching id of a nonblocking operation.
    requests: HashMap<u64, u64>,
    /// Split collectives begun and not ended: matching id and bytes.
    split: VecDeque<(u64, u64)>,
    /// Whether the rank's handle was ever created: only then is it defined.
    pub used: bool,
    /// `IoOperationBegin` records written.
    pub operations: u64,
    /// Whether any I/O record (handle or file deletion) was written: then the paradigm and the
    /// file are defined.
    pub any: bool,
}

impl IoState {
    /// Records at the start of `c`, right after its `Enter`; `handle`: the rank's handle.
    pub fn at_start(
        &mut self,
        kind: IoCall,
        c: &MpiCall,
        handle: u32,
        time: u64,
        out: &mut Out,
    ) -> Result<(), ExportError> {
        self.in_call = None;
        if self.open_files == 0 {
            return Ok(());
        }
        let (mode, flags, bytes) = match kind {
            IoCall::Sync => (
                ffi::OTF2_IO_OPERATION_MODE_FLUSH,
                ffi::OTF2_IO_OPERATION_FLAG_NONE,
                0,
            ),
            IoCall::Op {
                mode,
                collective,
                blocking,
            } => {
                let mut flags = ffi::OTF2_IO_OPERATION_FLAG_NONE;
                if collective {
                    flags |= ffi::OTF2_IO_OPERATION_FLAG_COLLECTIVE;
                }
                if blocking != Blocking::Yes {
                    flags |= ffi::OTF2_IO_OPERATION_FLAG_NON_BLOCKING;
                }
                (mode, flags, c.bytes)
            }
            _ => return Ok(()),
        };
        let id = self.next_id;
        self.next_id += 1;
        let code = out
            .w
            .io_operation_begin(time, handle, mode, flags, bytes, id);
        (out.done)(code, "IoOperationBegin")?;
        self.operations += 1;
        match kind {
            IoCall::Op {
                blocking: Blocking::Request,
                ..
            } if c.request != 0 => {
                self.requests.insert(c.request, id);
            }
            IoCall::Op {
                blocking: Blocking::SplitBegin,
                ..
            } => self.split.push_back((id, bytes)),
            _ => {}
        }
        self.in_call = Some(id);
        Ok(())
    }

    /// Records at the end of `c`, right before its `Leave`.
    pub fn at_end(
        &mut self,
        kind: IoCall,
        c: &MpiCall,
        handle: u32,
        time: u64,
        out: &mut Out,
    ) -> Result<(), ExportError> {
        let w = out.w;
        let in_call = self.in_call.take();
        match kind {
            IoCall::Open => {
                if self.open_files == 0 {
                    let code = w.io_create_handle(
                        time,
                        handle,
                        ffi::OTF2_IO_ACCESS_MODE_READ_WRITE,
                        ffi::OTF2_IO_CREATION_FLAG_NONE,
                        ffi::OTF2_IO_STATUS_FLAG_NONE,
                    );
                    (out.done)(code, "IoCreateHandle")?;
                    self.used = true;
                    self.any = true;
                }
                self.open_files += 1;
                Ok(())
            }
            IoCall::Close => {
                if self.open_files == 1 {
                    // Operations a correct program completed before closing, left open here
                    // (a trace cut short), cannot complete on a destroyed handle.
                    self.requests.clear();
                    self.split.clear();
                    let code = w.io_destroy_handle(time, handle);
                    (out.done)(code, "IoDestroyHandle")?;
                }
                self.open_files = self.open_files.saturating_sub(1);
                Ok(())
            }
            IoCall::Delete => {
                self.any = true;
                let code = w.io_delete_file(time, PARADIGM, FILE);
                (out.done)(code, "IoDeleteFile")
            }
            IoCall::Sync
            | IoCall::Op {
                blocking: Blocking::Yes,
                ..
            } => {
                let Some(id) = in_call else { return Ok(()) };
                let bytes = if kind == IoCall::Sync { 0 } else { c.bytes };
                complete(out, handle, bytes, id, time)
            }
            IoCall::Op { .. } => {
                let Some(id) = in_call else { return Ok(()) };
                let code = w.io_operation_issued(time, handle, id);
                (out.done)(code, "IoOperationIssued")
            }
            IoCall::SplitEnd => {
                if self.open_files == 0 {
                    return Ok(());
                }
                let Some((id, bytes)) = self.split.pop_front() else {
                    return Ok(());
                };
                complete(out, handle, bytes, id, time)
            }
        }
    }

    /// The `Wait`/`Test` completing `request` ended at `time`, having moved `bytes`: if the
    /// request is a nonblocking I/O operation's, its completion. Returns whether it was one.
    pub fn request_done(
        &mut self,
        request: u64,
        bytes: u64,
        handle: u32,
        time: u64,
        out: &mut Out,
    ) -> Result<bool, ExportError> {
        let Some(id) = self.requests.remove(&request) else {
            return Ok(false);
        };
        complete(out, handle, bytes, id, time)?;
        Ok(true)
    }
}

fn complete(out: &mut Out, handle: u32, bytes: u64, id: u64, time: u64) -> Result<(), ExportError> {
    let code = out.w.io_operation_complete(time, handle, bytes, id);
    (out.done)(code, "IoOperationComplete")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_classify() {
        let op = |mode, collective, blocking| {
            Some(IoCall::Op {
                mode,
                collective,
                blocking,
            })
        };
        let (r, w) = (
            ffi::OTF2_IO_OPERATION_MODE_READ,
            ffi::OTF2_IO_OPERATION_MODE_WRITE,
        );
        assert_eq!(IoCall::of("MPI_File_read_at"), op(r, false, Blocking::Yes));
        assert_eq!(
            IoCall::of("MPI_File_write_all_c"),
            op(w, true, Blocking::Yes)
        );
        assert_eq!(
            IoCall::of("MPI_File_iwrite_at_all"),
            op(w, true, Blocking::Request)
        );
        assert_eq!(
            IoCall::of("MPI_File_iread_shared"),
            op(r, false, Blocking::Request)
        );
        assert_eq!(
            IoCall::of("MPI_File_write_ordered_begin"),
            op(w, true, Blocking::SplitBegin)
        );
        assert_eq!(
            IoCall::of("MPI_File_read_at_all_end"),
            Some(IoCall::SplitEnd)
        );
        assert_eq!(IoCall::of("MPI_File_open"), Some(IoCall::Open));
        assert_eq!(IoCall::of("MPI_File_seek"), None);
        assert_eq!(IoCall::of("MPI_File_set_view"), None);
        assert_eq!(IoCall::of("MPI_Send"), None);
    }
}
