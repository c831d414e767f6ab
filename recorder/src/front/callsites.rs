//! Call sites (`--callsites`): the return address of each wrapped call, as a small per-rank id.
//!
//! A call record carries the id (a one- or two-byte varint), never the address: the first call
//! from a place defines it once with a [`CallSite`] record that names the file it lies in and that
//! file's load address, so that `evenflush report --callsites` can resolve it to a source line
//! after the run, also for position-independent code loaded at a different address each run.
//!
//! The lookup on the hot path is a direct-mapped cache per thread; a miss takes the rank-wide map
//! under a lock, and a place never seen by any thread also asks the dynamic linker (`dladdr`),
//! once per call site for the whole run.

use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::Mutex;

use format::{CallSite, Event, NO_SITE, RawBuf};

/// Entries of a thread's cache: a program has a few dozen to a few thousand MPI call sites, and
/// the hot loops use a handful.
pub const CACHE_SLOTS: usize = 64;

/// One thread's cache: (return address, id), address 0 = empty.
pub type SiteCache = [(u64, u32); CACHE_SLOTS];

/// Every call site of this process: address to id.
static SITES: Mutex<Option<HashMap<u64, u32>>> = Mutex::new(None);

#[inline]
fn slot(address: u64) -> usize {
    // Return addresses differ in their low bits; fold some higher ones in for code spread out.
    ((address ^ (address >> 12)) as usize) % CACHE_SLOTS
}

/// The id of the call site at `address` (the wrapper's return address) for a record of this
/// thread; a site no thread has seen yet gets its definition written to this thread's buffer
/// first, so the definition precedes every call that names it in this stream.
#[inline]
pub fn site_of(cache: &mut SiteCache, buf: &mut RawBuf, address: u64) -> u32 {
    let s = slot(address);
    let (cached, id) = cache[s];
    if cached == address {
        return id;
    }
    let id = intern(buf, address);
    cache[s] = (address, id);
    id
}

#[cold]
fn intern(buf: &mut RawBuf, address: u64) -> u32 {
    let mut sites = SITES.lock().unwrap_or_else(|e| e.into_inner());
    let sites = sites.get_or_insert_with(HashMap::new);
    if let Some(&id) = sites.get(&address) {
        return id;
    }
    let Ok(id) = u32::try_from(sites.len() + 1) else {
        return NO_SITE;
    };
    sites.insert(address, id);
    let (file, base) = locate(address);
    buf.push_event(&Event::CallSite(CallSite {
        id,
        address,
        base,
        file,
    }));
    id
}

/// The file holding `address` and where it was loaded, as the dynamic linker knows them.
fn locate(address: u64) -> (String, u64) {
    let mut info: libc::Dl_info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr only reads the loader's tables and fills `info`, a valid out-parameter; any
    // address may be asked about (0 = not found).
    let found = unsafe { libc::dladdr(address as usize as *const libc::c_void, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return (String::new(), 0);
    }
    // SAFETY: dladdr set dli_fname to the loader's NUL-terminated path of the object, which stays
    // valid while the object is loaded (we copy it at once).
    let file = unsafe { CStr::from_ptr(info.dli_fname) }
        .to_string_lossy()
        .into_owned();
    let file = if file.is_empty() {
        // The main program: the loader names it "" on some systems.
        std::fs::read_link("/proc/self/exe")
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    } else {
        file
    };
    (file, info.dli_fbase as usize as u64)
}
