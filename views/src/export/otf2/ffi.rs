//! Every `unsafe` call into the OTF2 library, behind safe handles: an [`Archive`], its event files
//! ([`EvtFiles`]) and one [`EvtWriter`] per location, its local ([`DefFiles`]) and global
//! ([`GlobalDefWriter`]) definition writers. A handle borrows what it was opened from and is
//! closed by consuming it, so the borrow checker keeps every pointer handed to the library live.
//! The records' meaning is the callers' business (`calls`, `rma`, `io`, `comms`, `definitions`).

mod sys;

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::ffi::{CStr, c_void};
use std::marker::PhantomData;
use std::ptr;

pub use sys::{
    OTF2_AttributeValue, OTF2_COLLECTIVE_OP_ALLGATHER, OTF2_COLLECTIVE_OP_ALLGATHERV,
    OTF2_COLLECTIVE_OP_ALLREDUCE, OTF2_COLLECTIVE_OP_ALLTOALL, OTF2_COLLECTIVE_OP_ALLTOALLV,
    OTF2_COLLECTIVE_OP_ALLTOALLW, OTF2_COLLECTIVE_OP_BARRIER, OTF2_COLLECTIVE_OP_BCAST,
    OTF2_COLLECTIVE_OP_CREATE_HANDLE, OTF2_COLLECTIVE_OP_CREATE_HANDLE_AND_ALLOCATE,
    OTF2_COLLECTIVE_OP_DESTROY_HANDLE, OTF2_COLLECTIVE_OP_DESTROY_HANDLE_AND_DEALLOCATE,
    OTF2_COLLECTIVE_OP_EXSCAN, OTF2_COLLECTIVE_OP_GATHER, OTF2_COLLECTIVE_OP_GATHERV,
    OTF2_COLLECTIVE_OP_REDUCE, OTF2_COLLECTIVE_OP_REDUCE_SCATTER,
    OTF2_COLLECTIVE_OP_REDUCE_SCATTER_BLOCK, OTF2_COLLECTIVE_OP_SCAN, OTF2_COLLECTIVE_OP_SCATTER,
    OTF2_COLLECTIVE_OP_SCATTERV, OTF2_COLLECTIVE_ROOT_NONE, OTF2_COMM_FLAG_NONE,
    OTF2_COMPRESSION_NONE, OTF2_CommRef, OTF2_ErrorCode, OTF2_FILEMODE_WRITE, OTF2_GROUP_FLAG_NONE,
    OTF2_GROUP_TYPE_COMM_GROUP, OTF2_GROUP_TYPE_COMM_LOCATIONS, OTF2_GROUP_TYPE_COMM_SELF,
    OTF2_GroupRef, OTF2_IO_ACCESS_MODE_READ_WRITE, OTF2_IO_CREATION_FLAG_NONE,
    OTF2_IO_HANDLE_FLAG_NONE, OTF2_IO_OPERATION_FLAG_COLLECTIVE,
    OTF2_IO_OPERATION_FLAG_NON_BLOCKING, OTF2_IO_OPERATION_FLAG_NONE, OTF2_IO_OPERATION_MODE_FLUSH,
    OTF2_IO_OPERATION_MODE_READ, OTF2_IO_OPERATION_MODE_WRITE, OTF2_IO_PARADIGM_CLASS_PARALLEL,
    OTF2_IO_PARADIGM_FLAG_NONE, OTF2_IO_STATUS_FLAG_NONE, OTF2_IoFileRef, OTF2_IoHandleRef,
    OTF2_IoParadigmRef, OTF2_LOCATION_GROUP_TYPE_PROCESS, OTF2_LOCATION_TYPE_CPU_THREAD,
    OTF2_LOCK_EXCLUSIVE, OTF2_LOCK_SHARED, OTF2_LocationGroupRef, OTF2_LocationRef,
    OTF2_MEASUREMENT_OFF, OTF2_MEASUREMENT_ON, OTF2_PARADIGM_CLASS_PROCESS, OTF2_PARADIGM_MPI,
    OTF2_PARADIGM_PROPERTY_COMM_NAME_TEMPLATE, OTF2_PARADIGM_PROPERTY_RMA_WIN_NAME_TEMPLATE,
    OTF2_REGION_FLAG_NONE, OTF2_REGION_ROLE_BARRIER, OTF2_REGION_ROLE_COLL_ALL2ALL,
    OTF2_REGION_ROLE_COLL_ALL2ONE, OTF2_REGION_ROLE_COLL_ONE2ALL, OTF2_REGION_ROLE_COLL_OTHER,
    OTF2_REGION_ROLE_FUNCTION, OTF2_REGION_ROLE_POINT2POINT, OTF2_RMA_ATOMIC_TYPE_ACCUMULATE,
    OTF2_RMA_ATOMIC_TYPE_COMPARE_AND_SWAP, OTF2_RMA_ATOMIC_TYPE_FETCH_AND_ACCUMULATE,
    OTF2_RMA_SYNC_LEVEL_MEMORY, OTF2_RMA_SYNC_LEVEL_NONE, OTF2_RMA_SYNC_LEVEL_PROCESS,
    OTF2_RMA_WIN_FLAG_CREATE_DESTROY_EVENTS, OTF2_RMA_WIN_FLAG_NONE, OTF2_RegionRef,
    OTF2_RmaWinRef, OTF2_SUBSTRATE_POSIX, OTF2_SUCCESS, OTF2_StringRef, OTF2_SystemTreeNodeRef,
    OTF2_TYPE_STRING, OTF2_TimeStamp, OTF2_UNDEFINED_COMM, OTF2_UNDEFINED_IO_HANDLE,
    OTF2_UNDEFINED_LOCATION_GROUP, OTF2_UNDEFINED_SYSTEM_TREE_NODE, OTF2_UNDEFINED_TIMESTAMP,
    OTF2_UNDEFINED_UINT32,
};

use super::super::ExportError;

/// `Ok` for `OTF2_SUCCESS`, else an error naming `what` with the library's own words.
pub fn check(code: OTF2_ErrorCode, what: &str) -> Result<(), ExportError> {
    if code == OTF2_SUCCESS {
        return Ok(());
    }
    // SAFETY: OTF2_Error_GetName/GetDescription return pointers to static NUL-terminated
    // strings for every code (unknown codes included).
    let (name, desc) = unsafe {
        (
            CStr::from_ptr(sys::OTF2_Error_GetName(code)).to_string_lossy(),
            CStr::from_ptr(sys::OTF2_Error_GetDescription(code)).to_string_lossy(),
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
    sys::OTF2_FLUSH
}

unsafe extern "C" fn post_flush(user: *mut c_void, _file_type: u8, _location: u64) -> u64 {
    // SAFETY: `user` is the archive's `Cell<u64>` registered with the callbacks; the archive (and
    // so every call of this callback) does not outlive it, and all use is on this thread.
    unsafe { (*(user as *const Cell<u64>)).get() }
}

static FLUSH_CALLBACKS: sys::OTF2_FlushCallbacks = sys::OTF2_FlushCallbacks {
    otf2_pre_flush: Some(pre_flush),
    otf2_post_flush: Some(post_flush),
};

/// An open archive, being written; closed on drop if not closed explicitly.
pub struct Archive {
    /// Null once closed.
    ptr: *mut sys::OTF2_Archive,
    /// The latest time written, read by the post-flush callback; boxed so its address is stable.
    latest: Box<Cell<u64>>,
}

impl Archive {
    /// Creates the archive `dir/name.otf2` for writing, with `OTF2_Archive_Open`'s chunk sizes.
    pub fn create(dir: &CStr, name: &CStr, chunk_events: u64, chunk_defs: u64) -> Option<Archive> {
        // SAFETY: both strings are NUL-terminated and outlive the call; the constants are valid
        // enum values of this OTF2 version.
        let ptr = unsafe {
            sys::OTF2_Archive_Open(
                dir.as_ptr(),
                name.as_ptr(),
                OTF2_FILEMODE_WRITE,
                chunk_events,
                chunk_defs,
                OTF2_SUBSTRATE_POSIX,
                OTF2_COMPRESSION_NONE,
            )
        };
        if ptr.is_null() {
            return None;
        }
        Some(Archive {
            ptr,
            latest: Box::new(Cell::new(0)),
        })
    }

    /// The time the library stamps on its buffer flushes: set it to the latest time written.
    pub fn latest(&self) -> &Cell<u64> {
        &self.latest
    }

    /// Registers the flush callbacks, which stamp flushes with [`Archive::latest`].
    pub fn set_flush_callbacks(&self) -> OTF2_ErrorCode {
        let user = &*self.latest as *const Cell<u64> as *mut c_void;
        // SAFETY: the callbacks are a static; `user` points into `self.latest`, which lives as
        // long as the archive.
        unsafe { sys::OTF2_Archive_SetFlushCallbacks(self.ptr, &FLUSH_CALLBACKS, user) }
    }

    /// Serial collective callbacks: right for one writing process.
    pub fn set_serial_collective_callbacks(&self) -> OTF2_ErrorCode {
        // SAFETY: the archive is open.
        unsafe { sys::OTF2_Archive_SetSerialCollectiveCallbacks(self.ptr) }
    }

    pub fn set_creator(&self, creator: &CStr) -> OTF2_ErrorCode {
        // SAFETY: the archive is open; `creator` is NUL-terminated and outlives the call (the
        // library copies it).
        unsafe { sys::OTF2_Archive_SetCreator(self.ptr, creator.as_ptr()) }
    }

    /// Opens the event files; every location's events are written through them.
    pub fn open_evt_files(&self) -> Result<EvtFiles<'_>, ExportError> {
        // SAFETY: the archive is open.
        let code = unsafe { sys::OTF2_Archive_OpenEvtFiles(self.ptr) };
        check(code, "opening the event files")?;
        Ok(EvtFiles {
            archive: self,
            given: RefCell::new(HashSet::new()),
        })
    }

    /// Opens the local definition files (one per location, written empty here).
    pub fn open_def_files(&self) -> Result<DefFiles<'_>, ExportError> {
        // SAFETY: the archive is open.
        let code = unsafe { sys::OTF2_Archive_OpenDefFiles(self.ptr) };
        check(code, "opening the definition files")?;
        Ok(DefFiles { archive: self })
    }

    /// The global definition writer; it lives until the archive is closed.
    pub fn global_def_writer(&self) -> Option<GlobalDefWriter<'_>> {
        // SAFETY: the archive is open; the library owns the writer until the archive closes.
        let ptr = unsafe { sys::OTF2_Archive_GetGlobalDefWriter(self.ptr) };
        if ptr.is_null() {
            return None;
        }
        Some(GlobalDefWriter {
            ptr,
            _archive: PhantomData,
        })
    }

    pub fn close(mut self) -> OTF2_ErrorCode {
        let p = std::mem::replace(&mut self.ptr, ptr::null_mut());
        // SAFETY: `p` came from OTF2_Archive_Open and is closed exactly once (Drop sees null); no
        // handle borrows the archive any more, since `self` was moved in.
        unsafe { sys::OTF2_Archive_Close(p) }
    }
}

impl Drop for Archive {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: as in `close`; errors on this error path are not reportable.
            unsafe { sys::OTF2_Archive_Close(self.ptr) };
        }
    }
}

/// The archive's event files, open: hands out one [`EvtWriter`] per location.
pub struct EvtFiles<'a> {
    archive: &'a Archive,
    /// Locations whose writer was handed out: the library returns the same writer for a location
    /// asked twice, and two handles of one writer could outlive its closing.
    given: RefCell<HashSet<u64>>,
}

impl EvtFiles<'_> {
    /// The event writer of `location`; `None` when the library has none or it was handed out.
    pub fn writer(&self, location: OTF2_LocationRef) -> Option<EvtWriter<'_>> {
        if !self.given.borrow_mut().insert(location) {
            return None;
        }
        // SAFETY: the archive is open with its event files open.
        let ptr = unsafe { sys::OTF2_Archive_GetEvtWriter(self.archive.ptr, location) };
        if ptr.is_null() {
            return None;
        }
        Some(EvtWriter {
            ptr,
            _files: PhantomData,
        })
    }

    pub fn close_writer(&self, writer: EvtWriter<'_>) -> OTF2_ErrorCode {
        // SAFETY: the writer belongs to this archive and is closed once (it is consumed).
        unsafe { sys::OTF2_Archive_CloseEvtWriter(self.archive.ptr, writer.ptr) }
    }

    /// Closes the event files: no writer is left, since each borrows these files.
    pub fn close(self) -> OTF2_ErrorCode {
        // SAFETY: the archive is open with its event files open; no writer outlives `self`.
        unsafe { sys::OTF2_Archive_CloseEvtFiles(self.archive.ptr) }
    }
}

/// One location's event writer. Every record method returns the library's error code.
pub struct EvtWriter<'f> {
    /// Never null.
    ptr: *mut sys::OTF2_EvtWriter,
    _files: PhantomData<&'f EvtFiles<'f>>,
}

/// One safe method per event record: `name => C function(arguments after the time)`. The writer
/// and a null attribute list come first in every such call, then the time.
macro_rules! records {
    ($($name:ident => $sys:ident($($arg:ident: $ty:ty),*);)*) => {
        impl EvtWriter<'_> {
            $(
                // The C record's own arguments, one for one.
                #[allow(clippy::too_many_arguments)]
                pub fn $name(&self, time: OTF2_TimeStamp, $($arg: $ty),*) -> OTF2_ErrorCode {
                    // SAFETY: `self.ptr` is a live event writer of an open archive (a handle
                    // borrows the open event files and is closed only by consuming it), a null
                    // attribute list means none, and every other argument is a plain value.
                    unsafe { sys::$sys(self.ptr, ptr::null_mut(), time, $($arg),*) }
                }
            )*
        }
    };
}

records! {
    enter => OTF2_EvtWriter_Enter(region: OTF2_RegionRef);
    leave => OTF2_EvtWriter_Leave(region: OTF2_RegionRef);
    mpi_send => OTF2_EvtWriter_MpiSend(receiver: u32, comm: OTF2_CommRef, tag: u32, length: u64);
    mpi_isend => OTF2_EvtWriter_MpiIsend(receiver: u32, comm: OTF2_CommRef, tag: u32, length: u64, request: u64);
    mpi_isend_complete => OTF2_EvtWriter_MpiIsendComplete(request: u64);
    mpi_irecv_request => OTF2_EvtWriter_MpiIrecvRequest(request: u64);
    mpi_recv => OTF2_EvtWriter_MpiRecv(sender: u32, comm: OTF2_CommRef, tag: u32, length: u64);
    mpi_irecv => OTF2_EvtWriter_MpiIrecv(sender: u32, comm: OTF2_CommRef, tag: u32, length: u64, request: u64);
    mpi_request_cancelled => OTF2_EvtWriter_MpiRequestCancelled(request: u64);
    mpi_collective_begin => OTF2_EvtWriter_MpiCollectiveBegin();
    mpi_collective_end => OTF2_EvtWriter_MpiCollectiveEnd(op: u8, comm: OTF2_CommRef, root: u32, size_sent: u64, size_received: u64);
    buffer_flush => OTF2_EvtWriter_BufferFlush(stop_time: OTF2_TimeStamp);
    measurement_on_off => OTF2_EvtWriter_MeasurementOnOff(mode: u8);
    rma_win_create => OTF2_EvtWriter_RmaWinCreate(win: OTF2_RmaWinRef);
    rma_win_destroy => OTF2_EvtWriter_RmaWinDestroy(win: OTF2_RmaWinRef);
    rma_collective_begin => OTF2_EvtWriter_RmaCollectiveBegin();
    rma_collective_end => OTF2_EvtWriter_RmaCollectiveEnd(op: u8, sync_level: u32, win: OTF2_RmaWinRef, root: u32, bytes_sent: u64, bytes_received: u64);
    rma_request_lock => OTF2_EvtWriter_RmaRequestLock(win: OTF2_RmaWinRef, remote: u32, lock_id: u64, lock_type: u8);
    rma_release_lock => OTF2_EvtWriter_RmaReleaseLock(win: OTF2_RmaWinRef, remote: u32, lock_id: u64);
    rma_put => OTF2_EvtWriter_RmaPut(win: OTF2_RmaWinRef, remote: u32, bytes: u64, matching_id: u64);
    rma_get => OTF2_EvtWriter_RmaGet(win: OTF2_RmaWinRef, remote: u32, bytes: u64, matching_id: u64);
    rma_atomic => OTF2_EvtWriter_RmaAtomic(win: OTF2_RmaWinRef, remote: u32, atomic_type: u8, bytes_sent: u64, bytes_received: u64, matching_id: u64);
    rma_op_complete_non_blocking => OTF2_EvtWriter_RmaOpCompleteNonBlocking(win: OTF2_RmaWinRef, matching_id: u64);
    rma_op_complete_remote => OTF2_EvtWriter_RmaOpCompleteRemote(win: OTF2_RmaWinRef, matching_id: u64);
    io_create_handle => OTF2_EvtWriter_IoCreateHandle(handle: OTF2_IoHandleRef, mode: u8, creation_flags: u32, status_flags: u32);
    io_destroy_handle => OTF2_EvtWriter_IoDestroyHandle(handle: OTF2_IoHandleRef);
    io_delete_file => OTF2_EvtWriter_IoDeleteFile(io_paradigm: OTF2_IoParadigmRef, file: OTF2_IoFileRef);
    io_operation_begin => OTF2_EvtWriter_IoOperationBegin(handle: OTF2_IoHandleRef, mode: u8, operation_flags: u32, bytes_request: u64, matching_id: u64);
    io_operation_issued => OTF2_EvtWriter_IoOperationIssued(handle: OTF2_IoHandleRef, matching_id: u64);
    io_operation_complete => OTF2_EvtWriter_IoOperationComplete(handle: OTF2_IoHandleRef, bytes_result: u64, matching_id: u64);
}

/// The archive's local definition files, open.
pub struct DefFiles<'a> {
    archive: &'a Archive,
}

impl DefFiles<'_> {
    /// Writes `location`'s local definitions file with nothing in it (each location needs one).
    pub fn write_empty(&self, location: OTF2_LocationRef) -> Result<(), ExportError> {
        // SAFETY: the archive is open with its definition files open.
        let dw = unsafe { sys::OTF2_Archive_GetDefWriter(self.archive.ptr, location) };
        if dw.is_null() {
            return Err(ExportError::Other("OTF2: no definition writer".into()));
        }
        // SAFETY: `dw` is this archive's live writer, closed once, right away.
        check(
            unsafe { sys::OTF2_Archive_CloseDefWriter(self.archive.ptr, dw) },
            "closing a definition writer",
        )
    }

    pub fn close(self) -> OTF2_ErrorCode {
        // SAFETY: the archive is open with its definition files open; every writer is closed.
        unsafe { sys::OTF2_Archive_CloseDefFiles(self.archive.ptr) }
    }
}

/// The archive's global definition writer.
pub struct GlobalDefWriter<'a> {
    /// Never null.
    ptr: *mut sys::OTF2_GlobalDefWriter,
    _archive: PhantomData<&'a Archive>,
}

/// One safe method per global definition of plain values: `name => C function(arguments)`.
macro_rules! definitions {
    ($($name:ident => $sys:ident($($arg:ident: $ty:ty),*);)*) => {
        impl GlobalDefWriter<'_> {
            $(
                // The C definition's own arguments, one for one.
                #[allow(clippy::too_many_arguments)]
                pub fn $name(&self, $($arg: $ty),*) -> OTF2_ErrorCode {
                    // SAFETY: `self.ptr` is the live global definition writer of an open archive
                    // (the handle borrows the archive), and every argument is a plain value.
                    unsafe { sys::$sys(self.ptr, $($arg),*) }
                }
            )*
        }
    };
}

definitions! {
    write_clock_properties => OTF2_GlobalDefWriter_WriteClockProperties(timer_resolution: u64, global_offset: u64, trace_length: u64, realtime_timestamp: u64);
    write_paradigm => OTF2_GlobalDefWriter_WriteParadigm(paradigm: u8, name: OTF2_StringRef, paradigm_class: u8);
    write_paradigm_property => OTF2_GlobalDefWriter_WriteParadigmProperty(paradigm: u8, property: u8, value_type: u8, value: OTF2_AttributeValue);
    write_region => OTF2_GlobalDefWriter_WriteRegion(id: OTF2_RegionRef, name: OTF2_StringRef, canonical_name: OTF2_StringRef, description: OTF2_StringRef, role: u8, paradigm: u8, flags: u32, source_file: OTF2_StringRef, begin_line: u32, end_line: u32);
    write_system_tree_node => OTF2_GlobalDefWriter_WriteSystemTreeNode(id: OTF2_SystemTreeNodeRef, name: OTF2_StringRef, class_name: OTF2_StringRef, parent: OTF2_SystemTreeNodeRef);
    write_location_group => OTF2_GlobalDefWriter_WriteLocationGroup(id: OTF2_LocationGroupRef, name: OTF2_StringRef, group_type: u8, system_tree_parent: OTF2_SystemTreeNodeRef, creating_location_group: OTF2_LocationGroupRef);
    write_location => OTF2_GlobalDefWriter_WriteLocation(id: OTF2_LocationRef, name: OTF2_StringRef, location_type: u8, number_of_events: u64, location_group: OTF2_LocationGroupRef);
    write_comm => OTF2_GlobalDefWriter_WriteComm(id: OTF2_CommRef, name: OTF2_StringRef, group: OTF2_GroupRef, parent: OTF2_CommRef, flags: u32);
    write_inter_comm => OTF2_GlobalDefWriter_WriteInterComm(id: OTF2_CommRef, name: OTF2_StringRef, group_a: OTF2_GroupRef, group_b: OTF2_GroupRef, common_communicator: OTF2_CommRef, flags: u32);
    write_rma_win => OTF2_GlobalDefWriter_WriteRmaWin(id: OTF2_RmaWinRef, name: OTF2_StringRef, comm: OTF2_CommRef, flags: u32);
    write_io_regular_file => OTF2_GlobalDefWriter_WriteIoRegularFile(id: OTF2_IoFileRef, name: OTF2_StringRef, scope: OTF2_SystemTreeNodeRef);
    write_io_handle => OTF2_GlobalDefWriter_WriteIoHandle(id: OTF2_IoHandleRef, name: OTF2_StringRef, file: OTF2_IoFileRef, io_paradigm: OTF2_IoParadigmRef, io_handle_flags: u32, comm: OTF2_CommRef, parent: OTF2_IoHandleRef);
}

impl GlobalDefWriter<'_> {
    pub fn write_string(&self, id: OTF2_StringRef, text: &CStr) -> OTF2_ErrorCode {
        // SAFETY: the writer is live (as in `definitions!`); `text` is NUL-terminated and
        // outlives the call.
        unsafe { sys::OTF2_GlobalDefWriter_WriteString(self.ptr, id, text.as_ptr()) }
    }

    pub fn write_group(
        &self,
        id: OTF2_GroupRef,
        name: OTF2_StringRef,
        group_type: u8,
        paradigm: u8,
        flags: u32,
        members: &[u64],
    ) -> OTF2_ErrorCode {
        // SAFETY: the writer is live; `members` is valid for the length passed and outlives the
        // call (an empty one may be any pointer, OTF2 reads none of it).
        unsafe {
            sys::OTF2_GlobalDefWriter_WriteGroup(
                self.ptr,
                id,
                name,
                group_type,
                paradigm,
                flags,
                members.len() as u32,
                if members.is_empty() {
                    ptr::null()
                } else {
                    members.as_ptr()
                },
            )
        }
    }

    /// An I/O paradigm without properties.
    pub fn write_io_paradigm(
        &self,
        id: OTF2_IoParadigmRef,
        identification: OTF2_StringRef,
        name: OTF2_StringRef,
        class: u8,
        flags: u32,
    ) -> OTF2_ErrorCode {
        // SAFETY: the writer is live; zero properties, so the three arrays may be null.
        unsafe {
            sys::OTF2_GlobalDefWriter_WriteIoParadigm(
                self.ptr,
                id,
                identification,
                name,
                class,
                flags,
                0,
                ptr::null(),
                ptr::null(),
                ptr::null(),
            )
        }
    }
}
