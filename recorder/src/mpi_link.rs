//! The private MPI transport the C layer offers the protocol: collectives and point-to-point
//! messages on a duplicate of `MPI_COMM_WORLD` made at init, never on the application's
//! communicators. The C layer installs it after `MPI_Init` and removes it at `MPI_Finalize`.

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

/// The offload protocol's [`offload::Transport`] over the private MPI communicator, with the
/// recorder's calibrated clock in nanoseconds: `ticks × 1e9 / ticks_per_sec`, from tick 0. That is
/// the convention of every offset in the trace (reconstruct and info convert ticks the same way),
/// and TSC readings in ns stay far below 2^53, so they pass through the f64 gather exactly.
pub struct MpiTransport {
    link: Link,
    ticks_per_ns: f64,
}

impl MpiTransport {
    /// The transport, if MPI is up and a session exists.
    pub fn new() -> Option<MpiTransport> {
        let link = link()?;
        let session = crate::core::session()?;
        Some(MpiTransport {
            link,
            ticks_per_ns: session.clock.ticks_per_sec / 1e9,
        })
    }

    pub fn link(&self) -> Link {
        self.link
    }

    fn rank_arg(&self, rank: usize) -> Result<i32, offload::TransportError> {
        let size = self.link.size().max(0) as usize;
        if rank < size {
            Ok(rank as i32)
        } else {
            Err(offload::TransportError::BadRank(rank, size))
        }
    }
}

fn failed(e: LinkError) -> offload::TransportError {
    offload::TransportError::Failed(e.to_string())
}

/// MPI tags are `int` and must stay below `MPI_TAG_UB` (at least 32767).
fn tag_arg(tag: offload::Tag) -> Result<i32, offload::TransportError> {
    i32::try_from(tag)
        .ok()
        .filter(|t| *t <= 32767)
        .ok_or_else(|| offload::TransportError::Failed(format!("tag {tag} is above 32767")))
}

impl offload::Transport for MpiTransport {
    fn rank(&self) -> usize {
        self.link.rank().max(0) as usize
    }
    fn size(&self) -> usize {
        self.link.size().max(0) as usize
    }
    fn now(&self) -> u64 {
        (crate::clock::now() as f64 / self.ticks_per_ns) as u64
    }
    fn to_tick(&self, local_ns: u64) -> u64 {
        (local_ns as f64 * self.ticks_per_ns) as u64
    }
    fn barrier(&mut self) -> Result<(), offload::TransportError> {
        self.link.barrier().map_err(failed)
    }
    fn allreduce_or(&mut self, flag: bool) -> Result<bool, offload::TransportError> {
        self.link.allreduce_or(flag).map_err(failed)
    }
    fn reduce_f64(
        &mut self,
        value: f64,
        op: offload::transport::ReduceOp,
    ) -> Result<Option<f64>, offload::TransportError> {
        let max = op == offload::transport::ReduceOp::Max;
        self.link.reduce_f64(value, max).map_err(failed)
    }
    fn decision_start(&mut self, word: u64) -> Result<(), offload::TransportError> {
        self.link.decision_start(word).map_err(failed)
    }
    fn decision_finish(&mut self) -> Result<u64, offload::TransportError> {
        self.link.decision_finish().map_err(failed)
    }
    fn send_u64(
        &mut self,
        dest: usize,
        tag: offload::Tag,
        value: u64,
    ) -> Result<(), offload::TransportError> {
        let dest = self.rank_arg(dest)?;
        self.link
            .send_u64(value, dest, tag_arg(tag)?)
            .map_err(failed)
    }
    fn recv_u64(&mut self, src: usize, tag: offload::Tag) -> Result<u64, offload::TransportError> {
        let src = self.rank_arg(src)?;
        self.link.recv_u64(src, tag_arg(tag)?).map_err(failed)
    }
}

/// Diagnostic run at init when `EVENFLUSH_CHECK_LINK` is set: exercises every transport operation
/// once and reports on stderr, so a new MPI or platform can be checked without the protocol.
pub fn self_check() -> Result<String, offload::TransportError> {
    use offload::Transport;
    let mut t = MpiTransport::new()
        .ok_or_else(|| offload::TransportError::Failed("no transport".into()))?;
    let (rank, size) = (t.rank(), t.size());
    let any_odd = t.allreduce_or(rank % 2 == 1)?;
    let highest = t.reduce_f64(rank as f64, offload::transport::ReduceOp::Max)?;
    t.decision_start(1 << rank.min(63))?;
    let word = t.decision_finish()?;
    if size > 1 {
        let next = (rank + 1) % size;
        let prev = (rank + size - 1) % size;
        // Even ranks send first so the ring cannot deadlock even with synchronous sends.
        if rank % 2 == 0 {
            t.send_u64(next, 0x4500, rank as u64)?;
            let got = t.recv_u64(prev, 0x4500)?;
            if got != prev as u64 {
                return Err(offload::TransportError::Failed(format!(
                    "ring got {got}, expected {prev}"
                )));
            }
        } else {
            let got = t.recv_u64(prev, 0x4500)?;
            t.send_u64(next, 0x4500, rank as u64)?;
            if got != prev as u64 {
                return Err(offload::TransportError::Failed(format!(
                    "ring got {got}, expected {prev}"
                )));
            }
        }
    }
    let root_value = t
        .link()
        .bcast_f64(if rank == 0 { 42.5 } else { 0.0 }, 0)
        .map_err(failed)?;
    t.barrier()?;
    let t0 = t.now();
    let tick = t.to_tick(t0);
    Ok(format!(
        "rank {rank}/{size}: allreduce_or={any_odd} reduce_max={highest:?} decision={word:#x} bcast={root_value} now={t0}ns tick={tick}"
    ))
}
