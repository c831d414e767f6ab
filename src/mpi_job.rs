//! When `evenflush` itself runs under `mpirun`: which MPI launched it, and byte messages between
//! its processes over that MPI. The binary links no MPI (Open MPI and MPICH have different ABIs),
//! so it loads the recorder library built for the launching MPI, whose `evenflush_job_*`
//! functions (`recorder/csrc/evf_job.c`) call PMPI for it with plain integers.

use std::ffi::{CStr, CString, c_char, c_int, c_void};

use anyhow::{Context, Result, bail};
use reconstruct::job::Transport;

use crate::mpi::Mpi;

/// The MPI whose launcher started this process as one of several, from the variables each
/// launcher sets: `None` when run alone (or as a job of one).
pub fn launched_by() -> Option<Mpi> {
    let size = |name: &str| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    if let Some(n) = size("OMPI_COMM_WORLD_SIZE") {
        return (n > 1).then_some(Mpi::OpenMpi);
    }
    if let Some(n) = size("PMI_SIZE") {
        return (n > 1).then_some(Mpi::Mpich);
    }
    None
}

type InitFn = unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int;
type SendFn = unsafe extern "C" fn(c_int, c_int, *const c_void, u64) -> c_int;
type IsendFn = unsafe extern "C" fn(c_int, c_int, *const c_void, u64, *mut u64) -> c_int;
type PollSendFn = unsafe extern "C" fn(u64, *mut c_int) -> c_int;
type IprobeFn = unsafe extern "C" fn(c_int, *mut c_int, *mut c_int, *mut c_int, *mut u64) -> c_int;
type RecvFn = unsafe extern "C" fn(c_int, c_int, *mut c_void, u64) -> c_int;
type ErrorStringFn = unsafe extern "C" fn(c_int, *mut c_char, c_int);
type FinalizeFn = unsafe extern "C" fn() -> c_int;
type AbortFn = unsafe extern "C" fn(c_int);

/// MPI, initialised for this process; finalised when dropped.
pub struct MpiJob {
    rank: usize,
    size: usize,
    fns: Fns,
    /// Sends begun and not known complete: their request handle and the bytes MPI still reads.
    pending: std::cell::RefCell<std::collections::VecDeque<(u64, Vec<u8>)>>,
}

/// Sends in flight at most; past it, the oldest is waited for (bounds the memory they hold).
const MAX_PENDING_SENDS: usize = 16;

#[derive(Clone, Copy)]
struct Fns {
    send: SendFn,
    isend: IsendFn,
    poll_send: PollSendFn,
    iprobe: IprobeFn,
    recv: RecvFn,
    error_string: ErrorStringFn,
    finalize: FinalizeFn,
    abort: AbortFn,
}

fn symbol(handle: *mut c_void, name: &str) -> Result<*mut c_void> {
    let c = CString::new(name)?;
    // SAFETY: `handle` came from a successful dlopen and is never closed; `c` is a valid C string.
    let p = unsafe { libc::dlsym(handle, c.as_ptr()) };
    if p.is_null() {
        bail!("the recorder library has no `{name}`: rebuild it (`cargo build --release`)");
    }
    Ok(p)
}

/// The function `name` of the loaded library as a pointer of type `F`.
///
/// # Safety
/// `F` must be an `extern "C"` function pointer type matching the function's C signature.
unsafe fn function<F: Copy>(handle: *mut c_void, name: &str) -> Result<F> {
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<*mut c_void>()) };
    let p = symbol(handle, name)?;
    // SAFETY: same size (checked above); the caller vouches for the signature.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

fn dl_error() -> String {
    // SAFETY: dlerror returns null or a valid C string owned by libc, copied at once.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        return "unknown error".into();
    }
    // SAFETY: non-null, NUL-terminated, see above.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

impl MpiJob {
    /// Loads the library for `mpi` and initialises MPI.
    pub fn start(mpi: Mpi) -> Result<MpiJob> {
        let lib = crate::run::library_path(mpi)?;
        let path = CString::new(lib.as_os_str().as_encoded_bytes())?;
        // SAFETY: a valid path; the library has no constructors (its MPI wrappers act only when
        // called) and stays loaded for the life of the process.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            bail!("cannot load {}: {}", lib.display(), dl_error());
        }
        // SAFETY: each type is the C signature of the function of that name in evf_job.c.
        let (init, fns) = unsafe {
            (
                function::<InitFn>(handle, "evenflush_job_init")?,
                Fns {
                    send: function(handle, "evenflush_job_send")?,
                    isend: function(handle, "evenflush_job_isend")?,
                    poll_send: function(handle, "evenflush_job_poll_send")?,
                    iprobe: function(handle, "evenflush_job_iprobe")?,
                    recv: function(handle, "evenflush_job_recv")?,
                    error_string: function(handle, "evenflush_job_error_string")?,
                    finalize: function(handle, "evenflush_job_finalize")?,
                    abort: function(handle, "evenflush_job_abort")?,
                },
            )
        };
        let (mut rank, mut size) = (0 as c_int, 0 as c_int);
        // SAFETY: two valid out-pointers; called once, from the main thread.
        let rc = unsafe { init(&mut rank, &mut size) };
        if rc != 0 {
            bail!("MPI_Init_thread failed: {}", fns.describe(rc));
        }
        Ok(MpiJob {
            rank: usize::try_from(rank).context("negative MPI rank")?,
            size: usize::try_from(size).context("negative MPI size")?,
            fns,
            pending: Default::default(),
        })
    }

    /// Ends the whole job at once: for an error on one process that the others cannot learn of.
    pub fn abort(&self, code: i32) -> ! {
        // SAFETY: MPI is initialised; MPI_Abort does not return.
        unsafe { (self.fns.abort)(code) };
        std::process::exit(code)
    }

    fn describe(&self, code: c_int) -> String {
        self.fns.describe(code)
    }
}

impl Fns {
    fn describe(&self, code: c_int) -> String {
        let mut text = [0 as c_char; 512];
        // SAFETY: the buffer holds 512 chars and the function writes at most that many, NUL
        // included.
        unsafe { (self.error_string)(code, text.as_mut_ptr(), text.len() as c_int) };
        // SAFETY: NUL-terminated by the function above (or all zeros).
        let s = unsafe { CStr::from_ptr(text.as_ptr()) }.to_string_lossy();
        format!("{s} (MPI error {code})")
    }
}

impl MpiJob {
    /// Forgets the sends that completed, oldest first; with `wait`, waits for the oldest.
    fn retire_sends(&self, wait: bool) -> Result<(), String> {
        let mut pending = self.pending.borrow_mut();
        while let Some(&(request, _)) = pending.front() {
            let mut done = 0 as c_int;
            // SAFETY: `request` came from evenflush_job_isend and was not completed yet (a
            // completed one is removed below, and its handle is never used again).
            let rc = unsafe { (self.fns.poll_send)(request, &mut done) };
            if rc != 0 {
                return Err(format!("completing a send: {}", self.describe(rc)));
            }
            if done == 0 {
                if !wait {
                    break;
                }
                // Polled for the reason `recv` is.
                std::thread::yield_now();
                continue;
            }
            pending.pop_front();
            if wait {
                break;
            }
        }
        Ok(())
    }
}

impl Drop for MpiJob {
    fn drop(&mut self) {
        // MPI must not be finalised while it still reads a buffer of ours.
        while !self.pending.borrow().is_empty() {
            if self.retire_sends(true).is_err() {
                // The buffers are leaked rather than freed under MPI.
                std::mem::forget(std::mem::take(&mut *self.pending.borrow_mut()));
                break;
            }
        }
        // SAFETY: MPI was initialised by `start` and is finalised once, here.
        unsafe { (self.fns.finalize)() };
    }
}

impl Transport for MpiJob {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn send(&self, dest: usize, tag: u32, bytes: &[u8]) -> Result<(), String> {
        let dest = c_int::try_from(dest).map_err(|_| format!("no process {dest}"))?;
        let tag = c_int::try_from(tag).map_err(|_| format!("tag {tag} out of range"))?;
        // SAFETY: `bytes` is valid for its length; MPI_Send only reads it.
        let rc = unsafe { (self.fns.send)(dest, tag, bytes.as_ptr().cast(), bytes.len() as u64) };
        if rc != 0 {
            return Err(format!(
                "sending {} bytes to process {dest}: {}",
                bytes.len(),
                self.describe(rc)
            ));
        }
        Ok(())
    }
    fn send_later(&self, dest: usize, tag: u32, bytes: Vec<u8>) -> Result<(), String> {
        self.retire_sends(false)?;
        if self.pending.borrow().len() >= MAX_PENDING_SENDS {
            self.retire_sends(true)?;
        }
        let dest_c = c_int::try_from(dest).map_err(|_| format!("no process {dest}"))?;
        let tag = c_int::try_from(tag).map_err(|_| format!("tag {tag} out of range"))?;
        let mut request = 0u64;
        // SAFETY: the bytes are moved into `pending` below and stay there, unmoved on the heap,
        // until the send completed.
        let rc = unsafe {
            (self.fns.isend)(
                dest_c,
                tag,
                bytes.as_ptr().cast(),
                bytes.len() as u64,
                &mut request,
            )
        };
        if rc != 0 {
            return Err(format!(
                "sending {} bytes to process {dest}: {}",
                bytes.len(),
                self.describe(rc)
            ));
        }
        self.pending.borrow_mut().push_back((request, bytes));
        Ok(())
    }

    fn sends_pending(&self) -> Result<usize, String> {
        self.retire_sends(false)?;
        Ok(self.pending.borrow().len())
    }

    fn complete_sends(&self) -> Result<(), String> {
        while !self.pending.borrow().is_empty() {
            self.retire_sends(true)?;
        }
        Ok(())
    }

    fn recv(&self, source: Option<usize>) -> Result<(usize, u32, Vec<u8>), String> {
        let want = match source {
            Some(s) => c_int::try_from(s).map_err(|_| format!("no process {s}"))?,
            None => -1,
        };
        // Polled, yielding the core between looks, rather than MPI's blocking probe, which polls
        // without yielding (MPICH's always): a process that waits that way takes the core from
        // the very process it waits for when processes outnumber cores (a 4-process replay of
        // 16 M events on 2 cores: over 200 s, against 14 s polled).
        loop {
            if let Some(m) = self.probed(want)? {
                return Ok(m);
            }
            std::thread::yield_now();
        }
    }

    fn try_recv(&self) -> Result<Option<(usize, u32, Vec<u8>)>, String> {
        self.probed(-1)
    }
}

impl MpiJob {
    /// The next message from `source` (-1: anyone) if one has arrived.
    fn probed(&self, source: c_int) -> Result<Option<(usize, u32, Vec<u8>)>, String> {
        let (mut found, mut from, mut tag, mut len) = (0 as c_int, 0 as c_int, 0 as c_int, 0u64);
        // SAFETY: four valid out-pointers.
        let rc = unsafe { (self.fns.iprobe)(source, &mut found, &mut from, &mut tag, &mut len) };
        if rc != 0 {
            return Err(format!("looking for a message: {}", self.describe(rc)));
        }
        if found == 0 {
            return Ok(None);
        }
        self.take(from, tag, len).map(Some)
    }

    /// Receives the message a probe found.
    fn take(&self, from: c_int, tag: c_int, len: u64) -> Result<(usize, u32, Vec<u8>), String> {
        let mut buf = vec![0u8; usize::try_from(len).map_err(|_| "message too long")?];
        // SAFETY: `buf` holds exactly the probed length; MPI_Recv writes at most that.
        let rc = unsafe { (self.fns.recv)(from, tag, buf.as_mut_ptr().cast(), len) };
        if rc != 0 {
            return Err(format!(
                "receiving from process {from}: {}",
                self.describe(rc)
            ));
        }
        Ok((from as usize, tag as u32, buf))
    }
}
