//! The plain `extern "C"` functions the generated C layer calls. No MPI types cross this line:
//! handles arrive as integers, communicators as recorder ids.
//!
//! Nothing here may unwind into C: a panic that reaches an `extern "C"` function aborts the process
//! (the language's rule), the recorder's own threads abort on a panic too
//! ([`crate::lifecycle::threads`]), and the code avoids panicking paths (poisoned locks are
//! recovered, writes report errors instead).

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use format::{CommId, Event, FunctionId, Marker};
use offload::config::Config;

use crate::back::{protocol, sink, transport};
use crate::clock::{self, CalibrationStart};
use crate::front::buffers::{self, ThreadBuf};
use crate::front::cost;
use crate::front::record::{self, CallRecord, record_event};
use crate::lifecycle::session::{self, Session, session};
use crate::lifecycle::{finish, signals};
use crate::{functions, mpi_link};

static CALIBRATION: Mutex<Option<CalibrationStart>> = Mutex::new(None);
/// Communicator ids below this are looked up in a bitset: the collective hook asks at every
/// blocking collective, and a mutex plus a hash lookup there was most of the recorder's cost of a
/// barrier. Ids are handed out densely from 0, so programs rarely go past it.
const DENSE_COMM_IDS: usize = 1 << 16;
static SPANS_WORLD_BITS: [AtomicU64; DENSE_COMM_IDS / 64] =
    [const { AtomicU64::new(0) }; DENSE_COMM_IDS / 64];
static SPANS_WORLD_SPARSE: Mutex<Option<HashMap<CommId, bool>>> = Mutex::new(None);

fn set_spans_world(comm: CommId, spans: bool) {
    let i = comm as usize;
    if i < DENSE_COMM_IDS {
        let (word, bit) = (&SPANS_WORLD_BITS[i / 64], 1u64 << (i % 64));
        // A reused id (its communicator freed) takes the new communicator's answer.
        if spans {
            word.fetch_or(bit, Ordering::Relaxed);
        } else {
            word.fetch_and(!bit, Ordering::Relaxed);
        }
    } else {
        SPANS_WORLD_SPARSE
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(HashMap::new)
            .insert(comm, spans);
    }
}

/// Whether communicator `comm` (a recorder id) contains every rank of `MPI_COMM_WORLD`.
pub fn comm_spans_world(comm: CommId) -> bool {
    let i = comm as usize;
    if i < DENSE_COMM_IDS {
        return SPANS_WORLD_BITS[i / 64].load(Ordering::Relaxed) & (1u64 << (i % 64)) != 0;
    }
    SPANS_WORLD_SPARSE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|m| m.get(&comm).copied())
        .unwrap_or(false)
}

/// Entry of `MPI_Init`: picks the clock and starts calibrating it. Returns 1 if the C layer must
/// read the TSC, 0 for `CLOCK_MONOTONIC`.
#[unsafe(no_mangle)]
pub extern "C" fn evf_rust_pre_init() -> c_int {
    let source = clock::select_source();
    *CALIBRATION.lock().unwrap_or_else(|e| e.into_inner()) = Some(clock::begin_calibration());
    (source == format::ClockSource::Tsc) as c_int
}

static LIBRARY: Mutex<Option<String>> = Mutex::new(None);

/// Before [`evf_rust_init`]: the MPI library's `MPI_Get_library_version` text, whose first line
/// names the library in this rank's `RankInfo` record.
///
/// # Safety
/// `version` must be null or point to `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn evf_rust_set_library(version: *const std::ffi::c_char, len: c_int) {
    if version.is_null() || len <= 0 {
        return;
    }
    // SAFETY: the C layer passes its static buffer and the length MPI reported for it.
    let bytes = unsafe { std::slice::from_raw_parts(version.cast::<u8>(), len as usize) };
    let bytes = bytes.split(|&b| b == 0).next().unwrap_or_default();
    let text = String::from_utf8_lossy(bytes);
    // MPICH pads its first line with a tab ("MPICH Version:\t4.0.2"): one space between words.
    let first = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .find(|l| !l.is_empty());
    *LIBRARY.lock().unwrap_or_else(|e| e.into_inner()) = first;
}

/// After a successful `MPI_Init`: reads the settings, finishes the clock calibration and starts
/// the session. Returns 0 if recording is disabled (bad settings): the library then stays inert.
#[unsafe(no_mangle)]
pub extern "C" fn evf_rust_init(
    world_rank: c_int,
    world_size: c_int,
    thread_level: c_int,
) -> c_int {
    let mut config = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            if world_rank == 0 {
                say!("evenflush: {e}; recording is disabled");
            }
            return 0;
        }
    };
    if let Err(e) = crate::front::filter::configure(&config.include, &config.exclude) {
        if world_rank == 0 {
            say!("evenflush: {e}; recording is disabled");
        }
        return 0;
    }
    let start = CALIBRATION.lock().unwrap_or_else(|e| e.into_inner()).take();
    let start = start.unwrap_or_else(clock::begin_calibration);
    let mut calibration = clock::finish_calibration(start, Duration::from_millis(20));
    // Stored in every rank file's header, so reconstruct can say how much of the cost it removes
    // is clock reads (a read of tens of thousands of ticks is not a clock this runs on).
    calibration.read_ticks = u16::try_from(clock::read_cost_ticks()).unwrap_or(u16::MAX);
    let rank = world_rank.max(0) as u32;
    let size = world_size.max(1) as u32;
    // `%h` makes each node write to its own directory (node-local disks); every rank expands it
    // with its own host name, the name its RankInfo record carries.
    let host = offload::config::hostname();
    // A world started by MPI_Comm_spawn has ranks 0.. of its own: it writes into a subdirectory
    // named after it, never over the parent's files (format/FORMAT.md, "Files and naming").
    let spawned = SPAWN_KEY.lock().unwrap_or_else(|e| e.into_inner()).clone();
    config.out = config
        .out
        .iter()
        .map(|d| offload::config::expand_out(d, &host))
        .map(|d| match &spawned {
            Some(key) => d.join(format::naming::spawn_dir_name(key)),
            None => d,
        })
        .collect();
    let mut dirs = config.out.clone();
    if dirs.is_empty() {
        dirs.push(offload::config::DEFAULT_OUT.into());
    }
    for dir in &dirs {
        if let Err(e) = std::fs::create_dir_all(dir) {
            say!(
                "evenflush: rank {rank}: cannot create {}: {e}",
                dir.display()
            );
        }
    }
    sink::configure(
        dirs,
        session::file_header(rank, size, calibration),
        config.zstd_level,
        config.writer,
        config.layout,
    );
    let session = Session {
        rank,
        size,
        thread_level,
        config,
        clock: calibration,
    };
    if !session::start_session(session) {
        return 0;
    }
    for (id, (name, _)) in functions::FUNCTIONS.iter().enumerate() {
        record_event(&Event::FunctionDef {
            id: id as FunctionId,
            name: (*name).to_string(),
        });
    }
    let mpi_library = LIBRARY
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .unwrap_or_default();
    record_event(&Event::RankInfo(Box::new(format::RankInfo {
        rank,
        world_size: size,
        pid: std::process::id(),
        host,
        mpi_library,
        run_id: session::run_id(),
    })));
    signals::install(
        session::session().map_or(Duration::from_secs(10), |s| s.config.abort_flush_limit),
    );
    1
}

static SPAWN_KEY: Mutex<Option<String>> = Mutex::new(None);

/// Before [`evf_rust_init`], only in a world started by `MPI_Comm_spawn`: the key that names its
/// output subdirectory, equal on all of its ranks.
///
/// # Safety
/// `key` must be null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn evf_rust_set_spawn_key(key: *const std::ffi::c_char) {
    if key.is_null() {
        return;
    }
    // SAFETY: the caller passes a NUL-terminated string that lives across this call.
    let key = unsafe { std::ffi::CStr::from_ptr(key) }
        .to_string_lossy()
        .into_owned();
    *SPAWN_KEY.lock().unwrap_or_else(|e| e.into_inner()) = Some(key);
}

/// `pthread_atfork` child hook: the forked child records nothing and never writes the parent's
/// trace. Runs in the child of a possibly multithreaded parent, so only async-signal-safe work.
#[unsafe(no_mangle)]
pub extern "C" fn evf_rust_atfork_child() {
    signals::after_fork_child();
}

/// The protocol settings every rank must share, as one number the C layer compares across ranks
/// at init (0 when this process has no session).
#[unsafe(no_mangle)]
pub extern "C" fn evf_rust_settings_fingerprint() -> u64 {
    session().map_or(0, |s| protocol::settings_fingerprint(&s.config))
}

/// Whether the wrappers should take their return addresses (`--callsites`).
#[unsafe(no_mangle)]
pub extern "C" fn evf_rust_callsites() -> c_int {
    session().map_or(0, |s| c_int::from(s.config.callsites))
}

/// The ranks' settings differ (or a rank is not recording): this rank records nothing, so that no
/// rank waits in a protocol step another rank never takes.
#[unsafe(no_mangle)]
pub extern "C" fn evf_rust_refuse(mine: u64, lowest: u64, highest: u64) {
    let rank = session().map_or(0, |s| s.rank);
    if rank == 0 || mine != highest {
        say!(
            "evenflush: rank {rank}: the ranks were started with different evenflush settings \
             (or some rank is not recording: settings fingerprints range from {lowest:#018x} to \
             {highest:#018x}, this rank has {mine:#018x}); nothing is recorded. Set the same \
             EVENFLUSH_* variables for every rank (evenflush run does)."
        );
    }
}

/// End of `MPI_Init` (its call record is stored): the recorder's start-up, then the `InitDone`
/// marker, where the measured span starts.
///
/// The marker is taken when the start-up is done, as the program regains control, and the
/// start-up is charged to nothing: it lies before the span, as the untraced run's `MPI_Init`
/// does. Charged to the first call instead, it was wall time before that call (under load, up to
/// most of a short run) that reconstruction can only remove after it.
#[unsafe(no_mangle)]
pub extern "C" fn evf_rust_init_done() {
    if std::env::var_os("EVENFLUSH_CHECK_LINK").is_some() {
        match transport::self_check() {
            Ok(report) => say!("evenflush: transport ok: {report}"),
            Err(e) => say!("evenflush: transport check failed: {e}"),
        }
    }
    protocol::on_init_done();
    record_event(&Event::Marker(Marker::InitDone { time: clock::now() }));
}

/// The thread level the world model runs at (negative: unknown), before the first request: it
/// decides whether the request table must lock (`front::requests::set_thread_level`).
#[unsafe(no_mangle)]
pub extern "C" fn evf_rust_request_thread_level(level: c_int) {
    crate::front::requests::set_thread_level(level);
}

/// A session was initialised: requests may come from threads at once from now on.
#[unsafe(no_mangle)]
pub extern "C" fn evf_rust_requests_for_sessions() {
    crate::front::requests::lock_for_sessions();
}

/// # Safety
/// `call` must point to a valid `evf_call_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn evf_rec_call(call: *const CallRecord) {
    // SAFETY: the C wrapper passes the address of a local record that lives across this call.
    if let Some(rec) = unsafe { call.as_ref() } {
        record::record_call(rec);
    }
}

/// This thread's buffer, for the C layer to cache (see `evf_record_call` in evf_runtime.h).
#[unsafe(no_mangle)]
pub extern "C" fn evf_rust_thread_buf() -> *const c_void {
    buffers::mine() as *const ThreadBuf as *const c_void
}

/// Stores a call record; returns 1 when the call's cost is sampled: the wrapper then calls
/// [`evf_rust_sample_end`] when its own work for the call is done.
///
/// # Safety
/// `thread_buf` must come from `evf_rust_thread_buf` called on this same thread; `call` must
/// point to a valid `evf_call_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn evf_rec_call_on(
    thread_buf: *const c_void,
    call: *const CallRecord,
) -> c_int {
    // SAFETY: per the contract, a live (leaked, never freed) ThreadBuf of this thread and a live
    // record on the caller's stack.
    let (tb, rec) = unsafe { ((thread_buf as *const ThreadBuf).as_ref(), call.as_ref()) };
    match (tb, rec) {
        (Some(tb), Some(rec)) => c_int::from(record::record_call_on(tb, rec)),
        _ => 0,
    }
}

/// The end of a sampled call's recorder work (see [`evf_rec_call_on`]): the call of `func`
/// ended at tick `call_end`.
///
/// # Safety
/// `thread_buf` must come from `evf_rust_thread_buf` called on this same thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn evf_rust_sample_end(thread_buf: *const c_void, func: u16, call_end: u64) {
    // SAFETY: per the contract, a live (leaked, never freed) ThreadBuf of this thread.
    if let Some(tb) = unsafe { (thread_buf as *const ThreadBuf).as_ref() } {
        cost::sample_end(tb, func, call_end);
    }
}

/// # Safety
/// `thread_buf` must come from `evf_rust_thread_buf` called on this same thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn evf_rec_completion(
    thread_buf: *const c_void,
    req_handle: u64,
    source: i32,
    tag: i32,
    bytes: u64,
    cancelled: c_int,
) {
    // SAFETY: per the contract, a live (leaked, never freed) ThreadBuf of this thread.
    if let Some(tb) = unsafe { (thread_buf as *const ThreadBuf).as_ref() } {
        record::record_completion_on(tb, req_handle, source, tag, bytes, cancelled != 0);
    }
}

/// World ranks as the C layer translated them; a negative value (`MPI_UNDEFINED`: a spawned or
/// connected process outside this world) becomes [`format::NOT_IN_WORLD`].
///
/// # Safety
/// `members` must point to `n` readable ints (or be null with `n == 0`).
unsafe fn world_ranks(members: *const i32, n: c_int) -> Vec<u32> {
    if members.is_null() || n <= 0 {
        return Vec::new();
    }
    // SAFETY: forwarded contract: an array of `n` translated ranks.
    unsafe { std::slice::from_raw_parts(members, n as usize) }
        .iter()
        .map(|&r| u32::try_from(r).unwrap_or(format::NOT_IN_WORLD))
        .collect()
}

/// # Safety
/// `members` must point to `n` readable ints (or be null with `n == 0`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn evf_rec_commdef(id: u32, members: *const i32, n: c_int) {
    // SAFETY: forwarded contract.
    let members = unsafe { world_ranks(members, n) };
    let world = session().map_or(0, |s| s.size);
    let spans = members.len() as u32 == world && {
        let mut sorted = members.clone();
        sorted.sort_unstable();
        sorted.iter().enumerate().all(|(i, &r)| i as u32 == r)
    };
    set_spans_world(id, spans);
    crate::front::origins::defined(id, &members);
    record_event(&Event::CommDef { id, members });
}

/// How communicator `id` (just defined, or `NO_COMM` when this rank got `MPI_COMM_NULL`) was made:
/// `form` 0 = by a call collective over `parent`, 1 = `MPI_Comm_create_group` on `parent` with
/// `tag`, 2 = `MPI_Comm_create_from_group` with the `len` bytes at `stringtag`.
///
/// # Safety
/// `stringtag` must point to `len` readable bytes (or be null with `len == 0`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn evf_rec_comm_origin(
    id: u32,
    form: u32,
    parent: u32,
    tag: i32,
    stringtag: *const std::ffi::c_char,
    len: usize,
) {
    let tag_bytes: &[u8] = if stringtag.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: per the contract, `len` readable bytes.
        unsafe { std::slice::from_raw_parts(stringtag.cast::<u8>(), len) }
    };
    crate::front::origins::made(id, form, parent, tag, tag_bytes);
}

/// The remote group of intercommunicator `id`, right after its `CommDef`.
///
/// # Safety
/// `members` must point to `n` readable ints (or be null with `n == 0`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn evf_rec_remote_group(id: u32, members: *const i32, n: c_int) {
    // SAFETY: forwarded contract.
    let members = unsafe { world_ranks(members, n) };
    record_event(&Event::RemoteGroup { id, members });
}

/// The group of the `MPI_Win_post`/`MPI_Win_start` on window `win` about to be recorded.
///
/// # Safety
/// `members` must point to `n` readable ints (or be null with `n == 0`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn evf_rec_epoch_group(win: u32, members: *const i32, n: c_int) {
    // SAFETY: forwarded contract.
    let members = unsafe { world_ranks(members, n) };
    record_event(&Event::EpochGroup { win, members });
}

/// Window `id` (already defined by a `CommDef` of its group) was created over communicator `comm`.
#[unsafe(no_mangle)]
pub extern "C" fn evf_rec_windef(id: u32, comm: u32) {
    record_event(&Event::WinDef { id, comm });
}

/// Recorder work measured by the C layer after a record was stored (completion processing):
/// charged to this thread's next event.
#[unsafe(no_mangle)]
pub extern "C" fn evf_rust_charge(ticks: u64) {
    cost::charge(ticks);
}

/// [`evf_rust_charge`] on this thread's buffer as the C layer caches it.
///
/// # Safety
/// `thread_buf` must come from `evf_rust_thread_buf` called on this same thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn evf_rust_charge_on(thread_buf: *const c_void, ticks: u64) {
    // SAFETY: per the contract, a live (leaked, never freed) ThreadBuf of this thread.
    if let Some(tb) = unsafe { (thread_buf as *const ThreadBuf).as_ref() } {
        cost::charge_on(tb, ticks);
    }
}

/// Events the C layer could not record (out of memory): counted and marked in the trace.
#[unsafe(no_mangle)]
pub extern "C" fn evf_rust_lost(events: u64) {
    record::lost(events);
}

/// Returns 1 when the hook did more than count (a decision point, charged on its own).
#[unsafe(no_mangle)]
pub extern "C" fn evf_after_blocking_collective(comm: u32, func: u16) -> c_int {
    c_int::from(protocol::after_blocking_collective(comm, func))
}

/// Entry of `MPI_Finalize` (the transport still works): the measured span ends here.
#[unsafe(no_mangle)]
pub extern "C" fn evf_rust_finalize_begin() {
    record_event(&Event::Marker(Marker::FinalizeStart { time: clock::now() }));
    protocol::on_finalize_start();
}

/// After `PMPI_Finalize` returned: write everything.
#[unsafe(no_mangle)]
pub extern "C" fn evf_rust_finalize_end() {
    finish::finish(None);
}

/// `MPI_Abort` (-1), exit without finalize (0) or a fatal signal: write what we have.
#[unsafe(no_mangle)]
pub extern "C" fn evf_abnormal_end(signal: c_int) {
    if session().is_none() {
        return;
    }
    if signal == -1 {
        // MPI_Abort must end the job even when the disk hangs.
        finish::finish_bounded(signal);
    } else {
        finish::finish(Some(signal));
    }
}

/// # Safety
/// `transport` must be null or stay valid until replaced (the C layer keeps it in a static).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn evf_rust_set_transport(transport: *const c_void) {
    // SAFETY: forwarded contract; the table layout is `mpi_link::RawTransport`.
    unsafe { mpi_link::install(transport as *const mpi_link::RawTransport) };
}

static WARNED_USER_BEFORE_INIT: AtomicBool = AtomicBool::new(false);
static NAMES: OnceLock<Mutex<HashMap<Vec<u8>, u32>>> = OnceLock::new();

/// The string id of `name`, defining it (in this thread's stream) on first use.
fn string_id(name: &[u8]) -> u32 {
    let names = NAMES.get_or_init(|| Mutex::new(HashMap::new()));
    let mut map = names.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&id) = map.get(name) {
        return id;
    }
    let id = map.len() as u32;
    map.insert(name.to_vec(), id);
    // Defined while holding the map lock, so no other thread can use the id before it exists.
    record_event(&Event::StringDef {
        id,
        text: String::from_utf8_lossy(name).into_owned(),
    });
    id
}

/// # Safety
/// `name` must be null or a NUL-terminated string.
unsafe fn name_bytes<'a>(name: *const std::ffi::c_char) -> &'a [u8] {
    if name.is_null() {
        return b"(null)";
    }
    // SAFETY: caller guarantees a NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes()
}

fn user_api_usable() -> bool {
    if session::active() {
        return true;
    }
    if !WARNED_USER_BEFORE_INIT.swap(true, Ordering::Relaxed)
        && std::env::var_os("EVENFLUSH_VERBOSE").is_some()
    {
        say!("evenflush: user records outside MPI_Init..MPI_Finalize are not recorded");
    }
    false
}

/// User API: records `len` bytes at `data` under `name`.
///
/// # Safety
/// `name` must be null or NUL-terminated; `data` must be readable for `len` bytes (or null).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn evenflush_record(
    name: *const std::ffi::c_char,
    data: *const c_void,
    len: usize,
) {
    if !user_api_usable() {
        return;
    }
    let time = clock::now();
    // SAFETY: forwarded contract.
    let id = string_id(unsafe { name_bytes(name) });
    let payload = if data.is_null() || len == 0 {
        Vec::new()
    } else {
        // SAFETY: the caller guarantees `len` readable bytes at `data`.
        unsafe { std::slice::from_raw_parts(data as *const u8, len) }.to_vec()
    };
    record_event(&Event::User(format::UserRecord {
        time,
        name: id,
        payload,
    }));
    // Copying the payload (twice: into a Vec, then into the buffer, faulting in fresh pages on the
    // way) is recorder work the program would not have done; for megabyte records it is a
    // millisecond. User records carry no cost field, so the time is charged to the thread's next
    // call, where reconstruction with DP removed takes it out.
    cost::charge(clock::now().saturating_sub(time));
}

fn region(name: *const std::ffi::c_char, begin: bool) {
    if !user_api_usable() {
        return;
    }
    let time = clock::now();
    // SAFETY: callers pass the user's pointer, which the API contract requires to be NUL-terminated.
    let id = string_id(unsafe { name_bytes(name) });
    record_event(&Event::Region(format::Region {
        time,
        name: id,
        begin,
    }));
    cost::charge(clock::now().saturating_sub(time));
}

/// User API: a named region begins.
///
/// # Safety
/// `name` must be null or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn evenflush_region_begin(name: *const std::ffi::c_char) {
    region(name, true);
}

/// User API: a named region ends.
///
/// # Safety
/// `name` must be null or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn evenflush_region_end(name: *const std::ffi::c_char) {
    region(name, false);
}
