//! The private MPI link the C layer offers the recorder: collectives and point-to-point
//! messages on a duplicate of `MPI_COMM_WORLD` made at init, never on the application's
//! communicators, plus the MPI-IO and group-file operations. The C layer installs it after
//! `MPI_Init` and removes it at `MPI_Finalize`. The protocol's transport over it is
//! [`crate::back::transport`].

use std::ffi::c_int;
use std::sync::atomic::{AtomicPtr, Ordering};

/// Table of C functions, mirrored by `evf_transport_t` in `csrc/evf_runtime.h`.
#[repr(C)]
pub struct RawTransport {
    pub rank: c_int,
    pub size: c_int,
    pub barrier: unsafe extern "C" fn() -> c_int,
    pub allreduce_or: unsafe extern "C" fn(c_int, *mut c_int) -> c_int,
    pub reduce_f64: unsafe extern "C" fn(f64, c_int, *mut f64) -> c_int,
    pub decision_start: unsafe extern "C" fn(u64) -> c_int,
    pub decision_finish: unsafe extern "C" fn(*mut u64) -> c_int,
    pub bcast_f64: unsafe extern "C" fn(*mut f64, c_int) -> c_int,
    pub bcast_u64: unsafe extern "C" fn(*mut u64, c_int) -> c_int,
    pub send_f64: unsafe extern "C" fn(f64, c_int, c_int) -> c_int,
    pub recv_f64: unsafe extern "C" fn(*mut f64, c_int, c_int) -> c_int,
    pub send_u64: unsafe extern "C" fn(u64, c_int, c_int) -> c_int,
    pub recv_u64: unsafe extern "C" fn(*mut u64, c_int, c_int) -> c_int,
    pub file_open: unsafe extern "C" fn(*const std::ffi::c_char) -> c_int,
    pub file_write_at: unsafe extern "C" fn(u64, *const std::ffi::c_void, u64) -> c_int,
    pub file_set_size: unsafe extern "C" fn(u64) -> c_int,
    pub file_sync: unsafe extern "C" fn() -> c_int,
    pub file_close: unsafe extern "C" fn() -> c_int,
    pub err_no_space: c_int,
    pub err_quota: c_int,
    pub set_watching: unsafe extern "C" fn(c_int),
    pub watchdog_abort: unsafe extern "C" fn(c_int),
    pub group_setup: unsafe extern "C" fn(c_int, *mut c_int, *mut c_int, *mut c_int) -> c_int,
    pub group_open: unsafe extern "C" fn(*const std::ffi::c_char) -> c_int,
    pub group_write:
        unsafe extern "C" fn(u64, *const std::ffi::c_void, u64, *mut u64, *mut u64) -> c_int,
    pub group_close: unsafe extern "C" fn() -> c_int,
    pub request_shared: unsafe extern "C" fn(u64) -> c_int,
    pub err_io: c_int,
}

/// This rank's place in its group (aggregated layout).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupPlace {
    pub rank: u32,
    pub size: u32,
    /// World rank of the group's member 0 (its lowest), which names the group file.
    pub leader: u32,
}

static TRANSPORT: AtomicPtr<RawTransport> = AtomicPtr::new(std::ptr::null_mut());

/// Installs (or with null, removes) the transport.
///
/// # Safety
/// `t` must be null or point to a table that stays valid and unchanged until it is replaced.
pub unsafe fn install(t: *const RawTransport) {
    TRANSPORT.store(t as *mut RawTransport, Ordering::Release);
}

/// An MPI call of the transport failed with this MPI error code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkError(pub i32);

impl std::fmt::Display for LinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MPI error {} on the recorder's private communicator",
            self.0
        )
    }
}

impl std::error::Error for LinkError {}

/// A handle on the installed transport.
#[derive(Clone, Copy)]
pub struct Link(&'static RawTransport);

/// The transport, if MPI is initialised and not yet finalised.
pub fn link() -> Option<Link> {
    let p = TRANSPORT.load(Ordering::Acquire);
    // SAFETY: `install` requires the table to stay valid while installed; the C layer keeps it in
    // a static and only removes it (null) at finalize.
    unsafe { p.as_ref() }.map(Link)
}

fn check(rc: c_int) -> Result<(), LinkError> {
    if rc == 0 { Ok(()) } else { Err(LinkError(rc)) }
}

// The function pointers below come from the C layer's table (valid while installed, see `link`).
impl Link {
    /// This process's rank in `MPI_COMM_WORLD`.
    pub fn rank(&self) -> i32 {
        self.0.rank
    }
    pub fn size(&self) -> i32 {
        self.0.size
    }
    pub fn barrier(&self) -> Result<(), LinkError> {
        // SAFETY: a PMPI call of the C layer on the private communicator, with plain values.
        check(unsafe { (self.0.barrier)() })
    }
    /// Logical OR of `value` over all ranks.
    pub fn allreduce_or(&self, value: bool) -> Result<bool, LinkError> {
        let mut out: c_int = 0;
        // SAFETY: a PMPI call of the C layer on the private communicator; it writes only
        // into a local that outlives it.
        check(unsafe { (self.0.allreduce_or)(value as c_int, &mut out) })?;
        Ok(out != 0)
    }
    /// Reduces one value per rank (minimum, or maximum with `max`) to rank 0: `Some` there.
    pub fn reduce_f64(&self, value: f64, max: bool) -> Result<Option<f64>, LinkError> {
        let mut result = 0.0;
        // SAFETY: a PMPI call of the C layer on the private communicator; it writes only
        // into a local that outlives it.
        check(unsafe { (self.0.reduce_f64)(value, c_int::from(max), &mut result) })?;
        Ok((self.rank() == 0).then_some(result))
    }
    /// Starts the split decision's nonblocking bitwise-OR reduction of `word`.
    pub fn decision_start(&self, word: u64) -> Result<(), LinkError> {
        // SAFETY: a PMPI call of the C layer on the private communicator, with plain values.
        check(unsafe { (self.0.decision_start)(word) })
    }
    /// Waits for the reduction [`Link::decision_start`] started; the OR over all ranks.
    pub fn decision_finish(&self) -> Result<u64, LinkError> {
        let mut word = 0;
        // SAFETY: a PMPI call of the C layer on the private communicator; it writes only
        // into a local that outlives it.
        check(unsafe { (self.0.decision_finish)(&mut word) })?;
        Ok(word)
    }
    /// Broadcasts `value` from `root`; returns the root's value on every rank.
    pub fn bcast_f64(&self, value: f64, root: i32) -> Result<f64, LinkError> {
        let mut v = value;
        // SAFETY: a PMPI call of the C layer on the private communicator; it writes only
        // into a local that outlives it.
        check(unsafe { (self.0.bcast_f64)(&mut v, root) })?;
        Ok(v)
    }
    pub fn bcast_u64(&self, value: u64, root: i32) -> Result<u64, LinkError> {
        let mut v = value;
        // SAFETY: a PMPI call of the C layer on the private communicator; it writes only
        // into a local that outlives it.
        check(unsafe { (self.0.bcast_u64)(&mut v, root) })?;
        Ok(v)
    }
    pub fn send_f64(&self, value: f64, dest: i32, tag: i32) -> Result<(), LinkError> {
        // SAFETY: a PMPI call of the C layer on the private communicator, with plain values.
        check(unsafe { (self.0.send_f64)(value, dest, tag) })
    }
    pub fn recv_f64(&self, source: i32, tag: i32) -> Result<f64, LinkError> {
        let mut v = 0.0;
        // SAFETY: a PMPI call of the C layer on the private communicator; it writes only
        // into a local that outlives it.
        check(unsafe { (self.0.recv_f64)(&mut v, source, tag) })?;
        Ok(v)
    }
    pub fn send_u64(&self, value: u64, dest: i32, tag: i32) -> Result<(), LinkError> {
        // SAFETY: a PMPI call of the C layer on the private communicator, with plain values.
        check(unsafe { (self.0.send_u64)(value, dest, tag) })
    }
    pub fn recv_u64(&self, source: i32, tag: i32) -> Result<u64, LinkError> {
        let mut v = 0;
        // SAFETY: a PMPI call of the C layer on the private communicator; it writes only
        // into a local that outlives it.
        check(unsafe { (self.0.recv_u64)(&mut v, source, tag) })?;
        Ok(v)
    }
}

/// The MPI-IO file operations of the C layer. Each returns the MPI error class of a failure.
impl Link {
    pub fn file_open(&self, path: &std::path::Path) -> Result<(), LinkError> {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| LinkError(-1))?;
        // SAFETY: `c` is a NUL-terminated string that outlives the call.
        check(unsafe { (self.0.file_open)(c.as_ptr()) })
    }
    pub fn file_write_at(&self, offset: u64, data: &[u8]) -> Result<(), LinkError> {
        // SAFETY: the pointer and length describe `data`, borrowed for the whole call.
        check(unsafe { (self.0.file_write_at)(offset, data.as_ptr().cast(), data.len() as u64) })
    }
    pub fn file_set_size(&self, size: u64) -> Result<(), LinkError> {
        // SAFETY: plain value argument; acts on the C layer's one open file.
        check(unsafe { (self.0.file_set_size)(size) })
    }
    pub fn file_sync(&self) -> Result<(), LinkError> {
        // SAFETY: no arguments; acts on the C layer's one open file.
        check(unsafe { (self.0.file_sync)() })
    }
    pub fn file_close(&self) -> Result<(), LinkError> {
        // SAFETY: no arguments; closes the C layer's one open file, if any.
        check(unsafe { (self.0.file_close)() })
    }
    /// Makes the group communicator: the ranks of this node (`per_node`) or all ranks. Collective
    /// over all ranks.
    pub fn group_setup(&self, per_node: bool) -> Result<GroupPlace, LinkError> {
        let (mut rank, mut size, mut leader) = (0, 0, 0);
        // SAFETY: the three out-pointers are valid locals for the duration of the call.
        check(unsafe {
            (self.0.group_setup)(c_int::from(per_node), &mut rank, &mut size, &mut leader)
        })?;
        Ok(GroupPlace {
            rank: rank.max(0) as u32,
            size: size.max(0) as u32,
            leader: leader.max(0) as u32,
        })
    }
    /// Opens the group file, collectively over the group; the outcome is the same on every member.
    pub fn group_open(&self, path: &std::path::Path) -> Result<(), LinkError> {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| LinkError(-1))?;
        // SAFETY: `c` is a NUL-terminated string that outlives the call.
        check(unsafe { (self.0.group_open)(c.as_ptr()) })
    }
    /// Writes `data` into the group file after `base`, after the lower members' data; returns
    /// (this member's offset from `base`, the bytes all members wrote). Collective over the
    /// group, durable on return; an error is the worst any member saw, the same on every member.
    pub fn group_write(&self, base: u64, data: &[u8]) -> Result<(u64, u64), LinkError> {
        let (mut offset, mut total) = (0u64, 0u64);
        // SAFETY: `data` is valid for `len` bytes and only read; the out-pointers are locals.
        check(unsafe {
            (self.0.group_write)(
                base,
                data.as_ptr().cast(),
                data.len() as u64,
                &mut offset,
                &mut total,
            )
        })?;
        Ok((offset, total))
    }
    /// Closes the group file and frees the group communicator. Collective over the group.
    pub fn group_close(&self) -> Result<(), LinkError> {
        // SAFETY: no arguments.
        check(unsafe { (self.0.group_close)() })
    }
    /// Tells the C wrappers to report each call to the watchdog.
    pub fn set_watching(&self, on: bool) {
        // SAFETY: sets a plain int in the C layer; wrappers only read it.
        unsafe { (self.0.set_watching)(c_int::from(on)) }
    }
    /// `MPI_Abort` on `MPI_COMM_WORLD` from the watchdog thread; does not return.
    pub fn watchdog_abort(&self, code: i32) {
        // SAFETY: ends the job; takes a plain value.
        unsafe { (self.0.watchdog_abort)(code) }
    }
    /// Whether MPI may hand out `handle` for several live requests at once (preallocated,
    /// already complete requests); any other handle names one live request at a time.
    pub fn request_shared(&self, handle: u64) -> bool {
        // SAFETY: takes a plain value and only compares it with constants of the MPI library.
        unsafe { (self.0.request_shared)(handle) != 0 }
    }
    /// Whether an error class means the disk (or quota) is full.
    pub fn is_out_of_space(&self, e: LinkError) -> bool {
        e.0 == self.0.err_no_space || e.0 == self.0.err_quota
    }
    /// Whether a failed write means this output directory takes no more: a full disk or quota,
    /// or `MPI_ERR_IO`, which is what both MPIs' MPI-IO report for `EDQUOT` (Open MPI 4.1 and
    /// MPICH 4.0 were seen to), so it cannot be told apart from a quota.
    pub fn directory_refuses(&self, e: LinkError) -> bool {
        self.is_out_of_space(e) || e.0 == self.0.err_io
    }
}
