//! Writers when `fdatasync` fails (NFS and Lustre report a full disk, a full quota or an I/O error
//! there, for data `pwrite` accepted) and when `pwrite` fails with `EDQUOT`. The faults come from
//! `fdatasync` and `pwrite64` defined in this test binary, which take the place of libc's for the
//! standard library's calls; each test arms them for its own directory, one test at a time.

use std::ffi::{c_int, c_void};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, AtomicI64, Ordering};

use format::chunk::EncodedChunk;
use format::framing::{FileHeader, encode_file_header};
use format::{ClockCalibration, ClockSource};
use offload::writer::{OutputPlan, PosixWriter, UringWriter, WriteError, Writer};

/// The directory whose files the faults hit (NUL-terminated bytes; empty = none).
static FAULT_DIR: Mutex<Vec<u8>> = Mutex::new(Vec::new());
/// `fdatasync` of such files: let this many through, then fail this many with `SYNC_ERRNO`.
static SYNC_SKIP: AtomicI64 = AtomicI64::new(0);
static SYNC_FAILURES: AtomicI64 = AtomicI64::new(0);
static SYNC_ERRNO: AtomicI32 = AtomicI32::new(0);
/// `pwrite64` to such files fails with `EDQUOT` once this many bytes went to them (-1 = never).
static WRITE_LEFT: AtomicI64 = AtomicI64::new(-1);
static SERIAL: Mutex<()> = Mutex::new(());

fn watched(fd: c_int) -> bool {
    let dir = FAULT_DIR.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if dir.is_empty() {
        return false;
    }
    std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .is_ok_and(|p| p.as_os_str().as_bytes().starts_with(&dir))
}

fn set_errno(e: c_int) {
    // SAFETY: errno is this thread's own.
    unsafe { *libc::__errno_location() = e };
}

/// # Safety
/// As libc's `fdatasync`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdatasync(fd: c_int) -> c_int {
    if watched(fd) {
        if SYNC_SKIP.load(Ordering::SeqCst) > 0 {
            SYNC_SKIP.fetch_sub(1, Ordering::SeqCst);
        } else if SYNC_FAILURES.load(Ordering::SeqCst) > 0 {
            SYNC_FAILURES.fetch_sub(1, Ordering::SeqCst);
            set_errno(SYNC_ERRNO.load(Ordering::SeqCst));
            return -1;
        }
    }
    // SAFETY: looks up the next definition, libc's; the name is NUL-terminated.
    let real = unsafe { libc::dlsym(libc::RTLD_NEXT, c"fdatasync".as_ptr()) };
    // SAFETY: libc's fdatasync has this signature.
    let real: extern "C" fn(c_int) -> c_int = unsafe { std::mem::transmute(real) };
    real(fd)
}

/// # Safety
/// As libc's `pwrite64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwrite64(fd: c_int, buf: *const c_void, n: usize, off: i64) -> isize {
    let left = WRITE_LEFT.load(Ordering::SeqCst);
    if left >= 0 && watched(fd) {
        if n as i64 > left {
            set_errno(libc::EDQUOT);
            return -1;
        }
        WRITE_LEFT.fetch_sub(n as i64, Ordering::SeqCst);
    }
    // SAFETY: looks up the next definition, libc's; the name is NUL-terminated.
    let real = unsafe { libc::dlsym(libc::RTLD_NEXT, c"pwrite64".as_ptr()) };
    // SAFETY: libc's pwrite64 has this signature.
    let real: extern "C" fn(c_int, *const c_void, usize, i64) -> isize =
        unsafe { std::mem::transmute(real) };
    real(fd, buf, n, off)
}

fn arm(dir: &Path, sync_skip: i64, sync_failures: i64, errno: c_int, write_left: i64) {
    let mut d = dir.as_os_str().as_bytes().to_vec();
    d.push(b'/');
    *FAULT_DIR.lock().unwrap_or_else(|e| e.into_inner()) = d;
    SYNC_SKIP.store(sync_skip, Ordering::SeqCst);
    SYNC_FAILURES.store(sync_failures, Ordering::SeqCst);
    SYNC_ERRNO.store(errno, Ordering::SeqCst);
    WRITE_LEFT.store(write_left, Ordering::SeqCst);
}

fn disarm() {
    FAULT_DIR.lock().unwrap_or_else(|e| e.into_inner()).clear();
    WRITE_LEFT.store(-1, Ordering::SeqCst);
}

const CHUNK: usize = 1000;

fn header() -> FileHeader {
    FileHeader {
        rank: 3,
        world_size: 4,
        part: 0,
        clock: ClockCalibration {
            ticks_per_sec: 1e9,
            tick_at_epoch: 0,
            realtime_ns: 0,
            source: ClockSource::Monotonic,
            read_ticks: 0,
        },
        created_unix_ns: 1,
        producer: "offload tests".into(),
    }
}

fn header_len() -> usize {
    encode_file_header(&header()).len()
}

fn chunk(index: u32) -> EncodedChunk {
    let mut bytes = vec![(index % 251) as u8; CHUNK];
    bytes[..4].copy_from_slice(&index.to_le_bytes());
    EncodedChunk {
        bytes,
        raw_len: 2 * CHUNK as u64,
        stored_len: CHUNK as u64,
        events: 10,
        first_ts: 0,
        last_ts: 0,
    }
}

/// `n` output directories under one scratch directory, which goes when the test ends, passing
/// or not.
struct Dirs {
    base: PathBuf,
    dirs: Vec<PathBuf>,
}

impl std::ops::Deref for Dirs {
    type Target = Vec<PathBuf>;
    fn deref(&self) -> &Vec<PathBuf> {
        &self.dirs
    }
}

impl Drop for Dirs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

fn dirs(name: &str, n: usize) -> Dirs {
    let base = std::env::temp_dir().join(format!("offload-sync-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let dirs = (0..n)
        .map(|i| {
            let d = base.join(format!("d{i}"));
            std::fs::create_dir_all(&d).unwrap();
            d
        })
        .collect();
    Dirs { base, dirs }
}

/// Chunk indices in a part file, in file order; `None` if there is no such file.
fn chunks_in(path: &Path) -> Option<Vec<u32>> {
    let data = std::fs::read(path).ok()?;
    let body = &data[header_len()..];
    assert_eq!(body.len() % CHUNK, 0, "{path:?} ends in a partial chunk");
    Some(
        body.chunks(CHUNK)
            .map(|c| u32::from_le_bytes(c[..4].try_into().unwrap()))
            .collect(),
    )
}

fn part(dir: &Path, k: u32) -> PathBuf {
    dir.join(format::writer::rank_file_name(3, k))
}

fn writer(kind: &str, dirs: &[PathBuf]) -> Box<dyn Writer> {
    let plan = OutputPlan {
        dirs: dirs.to_vec(),
        header: header(),
    };
    match kind {
        "posix" => Box::new(PosixWriter::new(plan)),
        _ => Box::new(UringWriter::new(plan).expect("io_uring works on the test machines")),
    }
}

fn write(w: &mut dyn Writer, range: std::ops::Range<u32>) -> Result<u64, WriteError> {
    w.write_chunks(&mut range.map(chunk)).map(|s| s.chunks)
}

/// ENOSPC or EDQUOT from the sync: the unconfirmed chunks move on to the next directory, in order,
/// and all count as written.
fn sync_out_of_space_moves_on(kind: &str, errno: c_int) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = dirs(&format!("oos-{kind}-{errno}"), 2);
    let mut w = writer(kind, &d);
    arm(&d[0], 0, 1, errno, -1);
    let written = write(w.as_mut(), 0..5);
    disarm();
    assert_eq!(written.unwrap(), 5);
    assert_eq!(
        chunks_in(&part(&d[0], 0)),
        Some(vec![]),
        "cut back to its header"
    );
    assert_eq!(chunks_in(&part(&d[1], 1)), Some(vec![0, 1, 2, 3, 4]));
    assert!(!w.stopped());
}

#[test]
fn posix_sync_enospc_moves_on() {
    sync_out_of_space_moves_on("posix", libc::ENOSPC);
}

#[test]
fn uring_sync_edquot_moves_on() {
    sync_out_of_space_moves_on("uring", libc::EDQUOT);
}

/// One EIO: the same directory, a new part; two: the chunks are given up, said so, and the next
/// call writes again.
fn sync_eio(kind: &str) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = dirs(&format!("eio-{kind}"), 1);
    let mut w = writer(kind, &d);
    arm(&d[0], 0, 1, libc::EIO, -1);
    assert_eq!(write(w.as_mut(), 0..3).unwrap(), 3);
    assert_eq!(chunks_in(&part(&d[0], 0)), Some(vec![]));
    assert_eq!(chunks_in(&part(&d[0], 1)), Some(vec![0, 1, 2]));
    arm(&d[0], 0, 2, libc::EIO, -1);
    match write(w.as_mut(), 3..5) {
        Err(WriteError::SyncLost { written, .. }) => assert_eq!(written.chunks, 0),
        other => panic!("expected SyncLost, got {other:?}"),
    }
    disarm();
    assert!(!w.stopped(), "recording goes on");
    assert_eq!(write(w.as_mut(), 5..7).unwrap(), 2);
    // Part 1 keeps what was synced; the failed chunks are gone from every file.
    assert_eq!(chunks_in(&part(&d[0], 1)), Some(vec![0, 1, 2]));
    let later: Vec<u32> = (2..6)
        .filter_map(|k| chunks_in(&part(&d[0], k)))
        .flatten()
        .collect();
    assert_eq!(later, vec![5, 6]);
}

#[test]
fn posix_sync_eio() {
    sync_eio("posix");
}

#[test]
fn uring_sync_eio() {
    sync_eio("uring");
}

/// A quota reached mid-call (`pwrite` fails with EDQUOT) while the sync of what came before fails
/// too: the unsynced chunks and the one that did not fit all go to the next directory, in order.
#[test]
fn posix_quota_then_failed_sync_keeps_order() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = dirs("quota-order", 2);
    let mut w = writer("posix", &d);
    assert_eq!(write(w.as_mut(), 0..2).unwrap(), 2);
    // Room for two more chunks in the first directory; its next sync fails.
    arm(&d[0], 0, 1, libc::ENOSPC, 2 * CHUNK as i64);
    let written = write(w.as_mut(), 2..6);
    disarm();
    assert_eq!(written.unwrap(), 4);
    assert_eq!(chunks_in(&part(&d[0], 0)), Some(vec![0, 1]));
    assert_eq!(chunks_in(&part(&d[1], 1)), Some(vec![2, 3, 4, 5]));
}

/// EDQUOT from `pwrite` rotates like ENOSPC.
#[test]
fn posix_quota_at_write_moves_on() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = dirs("quota", 2);
    let mut w = writer("posix", &d);
    arm(&d[0], 0, 0, 0, (header_len() + 2 * CHUNK) as i64);
    let written = write(w.as_mut(), 0..4);
    disarm();
    assert_eq!(written.unwrap(), 4);
    assert_eq!(chunks_in(&part(&d[0], 0)), Some(vec![0, 1]));
    assert_eq!(chunks_in(&part(&d[1], 1)), Some(vec![2, 3]));
}
