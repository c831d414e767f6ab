//! Hand-written declarations of the part of the OTF2 3.0 C API (libopen-trace-format2) the
//! exporter uses, checked against Debian's `/usr/include/otf2/*.h`. Linked by `build.rs`. Only
//! [`super`] calls them; everything else in the export goes through its safe wrappers.
#![allow(non_camel_case_types, dead_code)]

use std::ffi::{c_char, c_int, c_void};

#[repr(C)]
pub struct OTF2_Archive {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct OTF2_EvtWriter {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct OTF2_DefWriter {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct OTF2_GlobalDefWriter {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct OTF2_AttributeList {
    _opaque: [u8; 0],
}

/// A C enum: `int` on every ABI Debian builds for.
pub type OTF2_ErrorCode = c_int;
pub const OTF2_SUCCESS: OTF2_ErrorCode = 0;

pub type OTF2_TimeStamp = u64;
pub type OTF2_StringRef = u32;
pub type OTF2_RegionRef = u32;
pub type OTF2_SystemTreeNodeRef = u32;
pub type OTF2_LocationGroupRef = u32;
pub type OTF2_LocationRef = u64;
pub type OTF2_GroupRef = u32;
pub type OTF2_CommRef = u32;
pub type OTF2_RmaWinRef = u32;
pub type OTF2_IoParadigmRef = u8;
pub type OTF2_IoFileRef = u32;
pub type OTF2_IoHandleRef = u32;

/// `OTF2_AttributeValue`: a union of 8-byte and smaller scalars and definition references.
#[repr(C)]
#[derive(Clone, Copy)]
pub union OTF2_AttributeValue {
    pub uint8: u8,
    pub uint32: u32,
    pub uint64: u64,
    pub string_ref: OTF2_StringRef,
}

pub const OTF2_UNDEFINED_UINT32: u32 = u32::MAX;
pub const OTF2_UNDEFINED_STRING: OTF2_StringRef = u32::MAX;
pub const OTF2_UNDEFINED_SYSTEM_TREE_NODE: u32 = u32::MAX;
pub const OTF2_UNDEFINED_LOCATION_GROUP: u32 = u32::MAX;
pub const OTF2_UNDEFINED_COMM: u32 = u32::MAX;
pub const OTF2_COLLECTIVE_ROOT_NONE: u32 = u32::MAX;
pub const OTF2_UNDEFINED_TIMESTAMP: u64 = u64::MAX;
pub const OTF2_UNDEFINED_IO_HANDLE: u32 = u32::MAX;

pub const OTF2_FILEMODE_WRITE: u8 = 0;
pub const OTF2_COMPRESSION_NONE: u8 = 1;
pub const OTF2_SUBSTRATE_POSIX: u8 = 1;
pub const OTF2_NO_FLUSH: u8 = 0;
pub const OTF2_FLUSH: u8 = 1;

pub const OTF2_PARADIGM_MPI: u8 = 4;
pub const OTF2_PARADIGM_MEASUREMENT_SYSTEM: u8 = 6;
pub const OTF2_PARADIGM_CLASS_PROCESS: u8 = 0;
pub const OTF2_PARADIGM_PROPERTY_COMM_NAME_TEMPLATE: u8 = 0;
pub const OTF2_PARADIGM_PROPERTY_RMA_WIN_NAME_TEMPLATE: u8 = 1;
pub const OTF2_TYPE_STRING: u8 = 11;

pub const OTF2_REGION_ROLE_FUNCTION: u8 = 1;
pub const OTF2_REGION_ROLE_BARRIER: u8 = 15;
pub const OTF2_REGION_ROLE_COLL_ONE2ALL: u8 = 23;
pub const OTF2_REGION_ROLE_COLL_ALL2ONE: u8 = 24;
pub const OTF2_REGION_ROLE_COLL_ALL2ALL: u8 = 25;
pub const OTF2_REGION_ROLE_COLL_OTHER: u8 = 26;
pub const OTF2_REGION_ROLE_POINT2POINT: u8 = 28;
pub const OTF2_REGION_FLAG_NONE: u32 = 0;

pub const OTF2_LOCATION_GROUP_TYPE_PROCESS: u8 = 1;
pub const OTF2_LOCATION_TYPE_CPU_THREAD: u8 = 1;
pub const OTF2_GROUP_TYPE_COMM_LOCATIONS: u8 = 4;
pub const OTF2_GROUP_TYPE_COMM_GROUP: u8 = 5;
pub const OTF2_GROUP_TYPE_COMM_SELF: u8 = 6;
pub const OTF2_GROUP_FLAG_NONE: u32 = 0;
pub const OTF2_COMM_FLAG_NONE: u32 = 0;
pub const OTF2_RMA_WIN_FLAG_NONE: u32 = 0;
pub const OTF2_RMA_WIN_FLAG_CREATE_DESTROY_EVENTS: u32 = 1;

pub const OTF2_MEASUREMENT_ON: u8 = 1;
pub const OTF2_MEASUREMENT_OFF: u8 = 2;

pub const OTF2_COLLECTIVE_OP_BARRIER: u8 = 0;
pub const OTF2_COLLECTIVE_OP_BCAST: u8 = 1;
pub const OTF2_COLLECTIVE_OP_GATHER: u8 = 2;
pub const OTF2_COLLECTIVE_OP_GATHERV: u8 = 3;
pub const OTF2_COLLECTIVE_OP_SCATTER: u8 = 4;
pub const OTF2_COLLECTIVE_OP_SCATTERV: u8 = 5;
pub const OTF2_COLLECTIVE_OP_ALLGATHER: u8 = 6;
pub const OTF2_COLLECTIVE_OP_ALLGATHERV: u8 = 7;
pub const OTF2_COLLECTIVE_OP_ALLTOALL: u8 = 8;
pub const OTF2_COLLECTIVE_OP_ALLTOALLV: u8 = 9;
pub const OTF2_COLLECTIVE_OP_ALLTOALLW: u8 = 10;
pub const OTF2_COLLECTIVE_OP_ALLREDUCE: u8 = 11;
pub const OTF2_COLLECTIVE_OP_REDUCE: u8 = 12;
pub const OTF2_COLLECTIVE_OP_REDUCE_SCATTER: u8 = 13;
pub const OTF2_COLLECTIVE_OP_SCAN: u8 = 14;
pub const OTF2_COLLECTIVE_OP_EXSCAN: u8 = 15;
pub const OTF2_COLLECTIVE_OP_REDUCE_SCATTER_BLOCK: u8 = 16;
pub const OTF2_COLLECTIVE_OP_CREATE_HANDLE: u8 = 17;
pub const OTF2_COLLECTIVE_OP_DESTROY_HANDLE: u8 = 18;
pub const OTF2_COLLECTIVE_OP_CREATE_HANDLE_AND_ALLOCATE: u8 = 21;
pub const OTF2_COLLECTIVE_OP_DESTROY_HANDLE_AND_DEALLOCATE: u8 = 22;

pub const OTF2_RMA_SYNC_LEVEL_NONE: u32 = 0;
pub const OTF2_RMA_SYNC_LEVEL_PROCESS: u32 = 1;
pub const OTF2_RMA_SYNC_LEVEL_MEMORY: u32 = 2;
pub const OTF2_LOCK_EXCLUSIVE: u8 = 0;
pub const OTF2_LOCK_SHARED: u8 = 1;
pub const OTF2_RMA_ATOMIC_TYPE_ACCUMULATE: u8 = 0;
pub const OTF2_RMA_ATOMIC_TYPE_COMPARE_AND_SWAP: u8 = 3;
pub const OTF2_RMA_ATOMIC_TYPE_FETCH_AND_ACCUMULATE: u8 = 7;

pub const OTF2_IO_PARADIGM_CLASS_PARALLEL: u8 = 1;
pub const OTF2_IO_PARADIGM_FLAG_NONE: u32 = 0;
pub const OTF2_IO_HANDLE_FLAG_NONE: u32 = 0;
pub const OTF2_IO_ACCESS_MODE_READ_WRITE: u8 = 2;
pub const OTF2_IO_CREATION_FLAG_NONE: u32 = 0;
pub const OTF2_IO_STATUS_FLAG_NONE: u32 = 0;
pub const OTF2_IO_OPERATION_MODE_READ: u8 = 0;
pub const OTF2_IO_OPERATION_MODE_WRITE: u8 = 1;
pub const OTF2_IO_OPERATION_MODE_FLUSH: u8 = 2;
pub const OTF2_IO_OPERATION_FLAG_NONE: u32 = 0;
pub const OTF2_IO_OPERATION_FLAG_NON_BLOCKING: u32 = 1;
pub const OTF2_IO_OPERATION_FLAG_COLLECTIVE: u32 = 2;

pub type OTF2_PreFlushCallback = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        file_type: u8,
        location: OTF2_LocationRef,
        caller_data: *mut c_void,
        last: bool,
    ) -> u8,
>;
pub type OTF2_PostFlushCallback = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        file_type: u8,
        location: OTF2_LocationRef,
    ) -> OTF2_TimeStamp,
>;

#[repr(C)]
pub struct OTF2_FlushCallbacks {
    pub otf2_pre_flush: OTF2_PreFlushCallback,
    pub otf2_post_flush: OTF2_PostFlushCallback,
}

unsafe extern "C" {
    pub fn OTF2_Error_GetName(code: OTF2_ErrorCode) -> *const c_char;
    pub fn OTF2_Error_GetDescription(code: OTF2_ErrorCode) -> *const c_char;

    pub fn OTF2_Archive_Open(
        archive_path: *const c_char,
        archive_name: *const c_char,
        file_mode: u8,
        chunk_size_events: u64,
        chunk_size_defs: u64,
        file_substrate: u8,
        compression: u8,
    ) -> *mut OTF2_Archive;
    pub fn OTF2_Archive_Close(archive: *mut OTF2_Archive) -> OTF2_ErrorCode;
    pub fn OTF2_Archive_SetFlushCallbacks(
        archive: *mut OTF2_Archive,
        callbacks: *const OTF2_FlushCallbacks,
        user_data: *mut c_void,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_Archive_SetSerialCollectiveCallbacks(archive: *mut OTF2_Archive) -> OTF2_ErrorCode;
    pub fn OTF2_Archive_SetCreator(
        archive: *mut OTF2_Archive,
        creator: *const c_char,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_Archive_SetDescription(
        archive: *mut OTF2_Archive,
        description: *const c_char,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_Archive_OpenEvtFiles(archive: *mut OTF2_Archive) -> OTF2_ErrorCode;
    pub fn OTF2_Archive_CloseEvtFiles(archive: *mut OTF2_Archive) -> OTF2_ErrorCode;
    pub fn OTF2_Archive_OpenDefFiles(archive: *mut OTF2_Archive) -> OTF2_ErrorCode;
    pub fn OTF2_Archive_CloseDefFiles(archive: *mut OTF2_Archive) -> OTF2_ErrorCode;
    pub fn OTF2_Archive_GetEvtWriter(
        archive: *mut OTF2_Archive,
        location: OTF2_LocationRef,
    ) -> *mut OTF2_EvtWriter;
    pub fn OTF2_Archive_CloseEvtWriter(
        archive: *mut OTF2_Archive,
        writer: *mut OTF2_EvtWriter,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_Archive_GetDefWriter(
        archive: *mut OTF2_Archive,
        location: OTF2_LocationRef,
    ) -> *mut OTF2_DefWriter;
    pub fn OTF2_Archive_CloseDefWriter(
        archive: *mut OTF2_Archive,
        writer: *mut OTF2_DefWriter,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_Archive_GetGlobalDefWriter(archive: *mut OTF2_Archive)
    -> *mut OTF2_GlobalDefWriter;

    pub fn OTF2_GlobalDefWriter_WriteClockProperties(
        w: *mut OTF2_GlobalDefWriter,
        timer_resolution: u64,
        global_offset: u64,
        trace_length: u64,
        realtime_timestamp: u64,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_GlobalDefWriter_WriteString(
        w: *mut OTF2_GlobalDefWriter,
        id: OTF2_StringRef,
        text: *const c_char,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_GlobalDefWriter_WriteParadigm(
        w: *mut OTF2_GlobalDefWriter,
        paradigm: u8,
        name: OTF2_StringRef,
        paradigm_class: u8,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_GlobalDefWriter_WriteRegion(
        w: *mut OTF2_GlobalDefWriter,
        id: OTF2_RegionRef,
        name: OTF2_StringRef,
        canonical_name: OTF2_StringRef,
        description: OTF2_StringRef,
        role: u8,
        paradigm: u8,
        flags: u32,
        source_file: OTF2_StringRef,
        begin_line: u32,
        end_line: u32,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_GlobalDefWriter_WriteSystemTreeNode(
        w: *mut OTF2_GlobalDefWriter,
        id: OTF2_SystemTreeNodeRef,
        name: OTF2_StringRef,
        class_name: OTF2_StringRef,
        parent: OTF2_SystemTreeNodeRef,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_GlobalDefWriter_WriteLocationGroup(
        w: *mut OTF2_GlobalDefWriter,
        id: OTF2_LocationGroupRef,
        name: OTF2_StringRef,
        group_type: u8,
        system_tree_parent: OTF2_SystemTreeNodeRef,
        creating_location_group: OTF2_LocationGroupRef,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_GlobalDefWriter_WriteLocation(
        w: *mut OTF2_GlobalDefWriter,
        id: OTF2_LocationRef,
        name: OTF2_StringRef,
        location_type: u8,
        number_of_events: u64,
        location_group: OTF2_LocationGroupRef,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_GlobalDefWriter_WriteGroup(
        w: *mut OTF2_GlobalDefWriter,
        id: OTF2_GroupRef,
        name: OTF2_StringRef,
        group_type: u8,
        paradigm: u8,
        flags: u32,
        number_of_members: u32,
        members: *const u64,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_GlobalDefWriter_WriteComm(
        w: *mut OTF2_GlobalDefWriter,
        id: OTF2_CommRef,
        name: OTF2_StringRef,
        group: OTF2_GroupRef,
        parent: OTF2_CommRef,
        flags: u32,
    ) -> OTF2_ErrorCode;

    pub fn OTF2_GlobalDefWriter_WriteParadigmProperty(
        w: *mut OTF2_GlobalDefWriter,
        paradigm: u8,
        property: u8,
        value_type: u8,
        value: OTF2_AttributeValue,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_GlobalDefWriter_WriteInterComm(
        w: *mut OTF2_GlobalDefWriter,
        id: OTF2_CommRef,
        name: OTF2_StringRef,
        group_a: OTF2_GroupRef,
        group_b: OTF2_GroupRef,
        common_communicator: OTF2_CommRef,
        flags: u32,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_GlobalDefWriter_WriteRmaWin(
        w: *mut OTF2_GlobalDefWriter,
        id: OTF2_RmaWinRef,
        name: OTF2_StringRef,
        comm: OTF2_CommRef,
        flags: u32,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_GlobalDefWriter_WriteIoParadigm(
        w: *mut OTF2_GlobalDefWriter,
        id: OTF2_IoParadigmRef,
        identification: OTF2_StringRef,
        name: OTF2_StringRef,
        io_paradigm_class: u8,
        io_paradigm_flags: u32,
        number_of_properties: u8,
        properties: *const u8,
        types: *const u8,
        values: *const OTF2_AttributeValue,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_GlobalDefWriter_WriteIoRegularFile(
        w: *mut OTF2_GlobalDefWriter,
        id: OTF2_IoFileRef,
        name: OTF2_StringRef,
        scope: OTF2_SystemTreeNodeRef,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_GlobalDefWriter_WriteIoHandle(
        w: *mut OTF2_GlobalDefWriter,
        id: OTF2_IoHandleRef,
        name: OTF2_StringRef,
        file: OTF2_IoFileRef,
        io_paradigm: OTF2_IoParadigmRef,
        io_handle_flags: u32,
        comm: OTF2_CommRef,
        parent: OTF2_IoHandleRef,
    ) -> OTF2_ErrorCode;

    pub fn OTF2_EvtWriter_GetNumberOfEvents(w: *mut OTF2_EvtWriter, n: *mut u64) -> OTF2_ErrorCode;
    pub fn OTF2_EvtWriter_Enter(
        w: *mut OTF2_EvtWriter,
        attributes: *mut OTF2_AttributeList,
        time: OTF2_TimeStamp,
        region: OTF2_RegionRef,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_EvtWriter_Leave(
        w: *mut OTF2_EvtWriter,
        attributes: *mut OTF2_AttributeList,
        time: OTF2_TimeStamp,
        region: OTF2_RegionRef,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_EvtWriter_MpiSend(
        w: *mut OTF2_EvtWriter,
        attributes: *mut OTF2_AttributeList,
        time: OTF2_TimeStamp,
        receiver: u32,
        comm: OTF2_CommRef,
        tag: u32,
        length: u64,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_EvtWriter_MpiIsend(
        w: *mut OTF2_EvtWriter,
        attributes: *mut OTF2_AttributeList,
        time: OTF2_TimeStamp,
        receiver: u32,
        comm: OTF2_CommRef,
        tag: u32,
        length: u64,
        request: u64,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_EvtWriter_MpiIsendComplete(
        w: *mut OTF2_EvtWriter,
        attributes: *mut OTF2_AttributeList,
        time: OTF2_TimeStamp,
        request: u64,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_EvtWriter_MpiIrecvRequest(
        w: *mut OTF2_EvtWriter,
        attributes: *mut OTF2_AttributeList,
        time: OTF2_TimeStamp,
        request: u64,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_EvtWriter_MpiRecv(
        w: *mut OTF2_EvtWriter,
        attributes: *mut OTF2_AttributeList,
        time: OTF2_TimeStamp,
        sender: u32,
        comm: OTF2_CommRef,
        tag: u32,
        length: u64,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_EvtWriter_MpiIrecv(
        w: *mut OTF2_EvtWriter,
        attributes: *mut OTF2_AttributeList,
        time: OTF2_TimeStamp,
        sender: u32,
        comm: OTF2_CommRef,
        tag: u32,
        length: u64,
        request: u64,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_EvtWriter_MpiRequestCancelled(
        w: *mut OTF2_EvtWriter,
        attributes: *mut OTF2_AttributeList,
        time: OTF2_TimeStamp,
        request: u64,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_EvtWriter_MpiCollectiveBegin(
        w: *mut OTF2_EvtWriter,
        attributes: *mut OTF2_AttributeList,
        time: OTF2_TimeStamp,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_EvtWriter_MpiCollectiveEnd(
        w: *mut OTF2_EvtWriter,
        attributes: *mut OTF2_AttributeList,
        time: OTF2_TimeStamp,
        op: u8,
        comm: OTF2_CommRef,
        root: u32,
        size_sent: u64,
        size_received: u64,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_EvtWriter_BufferFlush(
        w: *mut OTF2_EvtWriter,
        attributes: *mut OTF2_AttributeList,
        time: OTF2_TimeStamp,
        stop_time: OTF2_TimeStamp,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_EvtWriter_RmaWinCreate(
        w: *mut OTF2_EvtWriter,
        attributes: *mut OTF2_AttributeList,
        time: OTF2_TimeStamp,
        win: OTF2_RmaWinRef,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_EvtWriter_RmaWinDestroy(
        w: *mut OTF2_EvtWriter,
        attributes: *mut OTF2_AttributeList,
        time: OTF2_TimeStamp,
        win: OTF2_RmaWinRef,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_EvtWriter_RmaCollectiveBegin(
        w: *mut OTF2_EvtWriter,
        attributes: *mut OTF2_AttributeList,
        time: OTF2_TimeStamp,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_EvtWriter_RmaCollectiveEnd(
        w: *mut OTF2_EvtWriter,
        attributes: *mut OTF2_AttributeList,
        time: OTF2_TimeStamp,
        op: u8,
        sync_level: u32,
        win: OTF2_RmaWinRef,
        root: u32,
        bytes_sent: u64,
        bytes_received: u64,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_EvtWriter_RmaRequestLock(
        w: *mut OTF2_EvtWriter,
        attributes: *mut OTF2_AttributeList,
        time: OTF2_TimeStamp,
        win: OTF2_RmaWinRef,
        remote: u32,
        lock_id: u64,
        lock_type: u8,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_EvtWriter_RmaReleaseLock(
        w: *mut OTF2_EvtWriter,
        attributes: *mut OTF2_AttributeList,
        time: OTF2_TimeStamp,
        win: OTF2_RmaWinRef,
        remote: u32,
        lock_id: u64,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_EvtWriter_RmaPut(
        w: *mut OTF2_EvtWriter,
        attributes: *mut OTF2_AttributeList,
        time: OTF2_TimeStamp,
        win: OTF2_RmaWinRef,
        remote: u32,
        bytes: u64,
        matching_id: u64,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_EvtWriter_RmaGet(
        w: *mut OTF2_EvtWriter,
        attributes: *mut OTF2_AttributeList,
        time: OTF2_TimeStamp,
        win: OTF2_RmaWinRef,
        remote: u32,
        bytes: u64,
        matching_id: u64,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_EvtWriter_RmaAtomic(
        w: *mut OTF2_EvtWriter,
        attributes: *mut OTF2_AttributeList,
        time: OTF2_TimeStamp,
        win: OTF2_RmaWinRef,
        remote: u32,
        atomic_type: u8,
        bytes_sent: u64,
        bytes_received: u64,
        matching_id: u64,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_EvtWriter_RmaOpCompleteNonBlocking(
        w: *mut OTF2_EvtWriter,
        attributes: *mut OTF2_AttributeList,
        time: OTF2_TimeStamp,
        win: OTF2_RmaWinRef,
        matching_id: u64,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_EvtWriter_RmaOpCompleteRemote(
        w: *mut OTF2_EvtWriter,
        attributes: *mut OTF2_AttributeList,
        time: OTF2_TimeStamp,
        win: OTF2_RmaWinRef,
        matching_id: u64,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_EvtWriter_IoCreateHandle(
        w: *mut OTF2_EvtWriter,
        attributes: *mut OTF2_AttributeList,
        time: OTF2_TimeStamp,
        handle: OTF2_IoHandleRef,
        mode: u8,
        creation_flags: u32,
        status_flags: u32,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_EvtWriter_IoDestroyHandle(
        w: *mut OTF2_EvtWriter,
        attributes: *mut OTF2_AttributeList,
        time: OTF2_TimeStamp,
        handle: OTF2_IoHandleRef,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_EvtWriter_IoDeleteFile(
        w: *mut OTF2_EvtWriter,
        attributes: *mut OTF2_AttributeList,
        time: OTF2_TimeStamp,
        io_paradigm: OTF2_IoParadigmRef,
        file: OTF2_IoFileRef,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_EvtWriter_IoOperationBegin(
        w: *mut OTF2_EvtWriter,
        attributes: *mut OTF2_AttributeList,
        time: OTF2_TimeStamp,
        handle: OTF2_IoHandleRef,
        mode: u8,
        operation_flags: u32,
        bytes_request: u64,
        matching_id: u64,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_EvtWriter_IoOperationIssued(
        w: *mut OTF2_EvtWriter,
        attributes: *mut OTF2_AttributeList,
        time: OTF2_TimeStamp,
        handle: OTF2_IoHandleRef,
        matching_id: u64,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_EvtWriter_IoOperationComplete(
        w: *mut OTF2_EvtWriter,
        attributes: *mut OTF2_AttributeList,
        time: OTF2_TimeStamp,
        handle: OTF2_IoHandleRef,
        bytes_result: u64,
        matching_id: u64,
    ) -> OTF2_ErrorCode;
    pub fn OTF2_EvtWriter_MeasurementOnOff(
        w: *mut OTF2_EvtWriter,
        attributes: *mut OTF2_AttributeList,
        time: OTF2_TimeStamp,
        mode: u8,
    ) -> OTF2_ErrorCode;
}
