//! The event model: what a trace says, independent of how it is stored.
//!
//! Timestamps are raw clock ticks of the recording rank. The rank's [`ClockCalibration`] turns ticks
//! into nanoseconds, and its [`ClockSample`]s relate its clock to rank 0's (the global clock). Keeping
//! ticks on disk means the hot path never divides, and reconstruction can re-derive every time.

/// Identifies an MPI function. The numbering is owned by the recorder's wrapper table
/// (`recorder/mpi_functions.tsv`); the trace carries each used name in a [`Event::FunctionDef`] so a
/// reader never needs that table.
pub type FunctionId = u16;

/// A recorder-assigned communicator id, unique within one rank's trace. 0 is `MPI_COMM_WORLD`,
/// 1 is `MPI_COMM_SELF`; others are defined by [`Event::CommDef`] before first use. RMA windows
/// take ids from the same space (an [`Event::WinDef`] follows their `CommDef`).
pub type CommId = u32;

/// `comm` value when the call names no communicator (or window).
pub const NO_COMM: CommId = u32::MAX;

/// An id into the trace's string table ([`Event::StringDef`]).
pub type StringId = u32;

/// `peer`/`root` value when the call has none.
pub const NO_RANK: i32 = -1;
/// `peer` value for a receive posted with `MPI_ANY_SOURCE` (the completion carries the real source).
pub const ANY_SOURCE: i32 = -2;
/// `peer` or `root` value for `MPI_PROC_NULL`.
pub const PROC_NULL: i32 = -3;
/// `root` value for `MPI_ROOT`: the root of a collective on an intercommunicator.
pub const ROOT: i32 = -4;
/// `tag` value when the call has none.
pub const NO_TAG: i32 = -1;
/// `tag` value for a receive posted with `MPI_ANY_TAG`.
pub const ANY_TAG: i32 = -2;
/// `request` value when the call creates or names no request.
pub const NO_REQUEST: u64 = 0;

/// One intercepted MPI call. This is the hot-path record: fixed size, `Copy`, no heap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MpiCall {
    pub func: FunctionId,
    /// Tick at entry to the wrapper, before the PMPI call.
    pub start: u64,
    /// Tick right after the PMPI call returned.
    pub end: u64,
    pub comm: CommId,
    /// Peer rank within `comm` (destination of a send, source of a receive), or one of
    /// [`NO_RANK`], [`ANY_SOURCE`], [`PROC_NULL`].
    pub peer: i32,
    pub tag: i32,
    /// Bytes this rank sends (or, for receive-only calls, the receive buffer's capacity).
    pub bytes: u64,
    /// Root rank within `comm` for rooted collectives (on an intercommunicator: a rank of the
    /// remote group, [`ROOT`] at the root, [`PROC_NULL`] at the rest of its group), else
    /// [`NO_RANK`].
    pub root: i32,
    /// The request this call created (`Isend`, `Irecv`, `Send_init`, ...) or started (`Start`),
    /// else [`NO_REQUEST`]. Completions name it again.
    pub request: u64,
    /// The recorder's own cost attributed to this event, in ticks: the direct perturbation d.
    pub cost: u32,
    /// Bytes that arrive in this rank's receive buffer in a collective that has one (the gathered
    /// data at a gather's root, a broadcast's data at the other ranks, a reduction's result, ...),
    /// else 0. Chunks before version 6 do not record it: 0 there means "not known".
    pub recv_bytes: u64,
    /// Where the program called this function: a [`CallSite`] id of this rank, or [`NO_SITE`]
    /// (call sites not recorded, the default; chunks before version 6 never have them).
    pub site: u32,
}

/// [`MpiCall::site`] when the call site was not recorded.
pub const NO_SITE: u32 = 0;

/// A place in the program that calls MPI: the return address of the wrapped call, with the file
/// it lies in, so that it can be resolved to a source line after the run (the addresses of a
/// position-independent file differ from run to run; `address - base` does not).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallSite {
    /// Rank-local id, from 1 ([`NO_SITE`] is 0).
    pub id: u32,
    /// The return address: the instruction after the call.
    pub address: u64,
    /// Where the file holding `address` was loaded (`dladdr`'s `dli_fbase`), 0 if unknown.
    pub base: u64,
    /// That file's path as the dynamic linker saw it, empty if unknown.
    pub file: String,
}

/// One request finished inside a `Wait*`/`Test*` call. Completions follow the [`MpiCall`] of the
/// completion call they belong to, in the order MPI reported them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Completion {
    pub request: u64,
    /// Actual source rank within the request's communicator (from `MPI_Status`), for receives;
    /// [`NO_RANK`] for sends.
    pub source: i32,
    /// Actual tag, for receives; [`NO_TAG`] for sends.
    pub tag: i32,
    /// Bytes actually received (from `MPI_Get_count` on the status), or sent.
    pub bytes: u64,
    pub cancelled: bool,
}

/// A user record made through `evenflush_record`: an opaque payload of any size.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct UserRecord {
    pub time: u64,
    pub name: StringId,
    pub payload: Vec<u8>,
}

/// Start or end of a user region (`evenflush_region_begin`/`_end`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Region {
    pub time: u64,
    pub name: StringId,
    pub begin: bool,
}

/// One equalised suspension, as this rank saw it (paper Fig. 3 and 5).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Suspension {
    /// Sequence number of the suspension, equal on all ranks.
    pub seq: u64,
    /// Local tick when the suspension started (t in Fig. 3).
    pub start: u64,
    /// The suspension time Z every rank waits for, in nanoseconds.
    pub z_ns: u64,
    /// Local tick when this rank actually resumed.
    pub end: u64,
    pub flushed: bool,
    /// Trace bytes written in this suspension, before and after compression.
    pub bytes_raw: u64,
    pub bytes_stored: u64,
    /// Time spent writing, in nanoseconds.
    pub write_ns: u64,
    /// How far past `start + Z` this rank resumed (Z arrived late), in nanoseconds.
    pub overshoot_ns: u64,
    /// The waiting part w of Z, the mean one-way message time m and the offset error bound d, in ns.
    pub w_ns: u64,
    pub m_ns: f64,
    pub d_ns: f64,
    /// This rank's clock offset to rank 0 used for this suspension, in ns (rank 0's clock minus ours).
    pub offset_ns: f64,
}

/// Nanoseconds per tick, as calibrated on this rank. Written once at the start of a rank file.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ClockCalibration {
    /// Ticks per second.
    pub ticks_per_sec: f64,
    /// Tick reading taken at the same instant as `realtime_ns` (for display only).
    pub tick_at_epoch: u64,
    /// `CLOCK_REALTIME` in ns since the Unix epoch when calibrated.
    pub realtime_ns: u64,
    /// Which clock produced the ticks.
    pub source: ClockSource,
    /// What one read of this clock adds to the program's time, in ticks, as the recorder measured
    /// it at init (0: not recorded). Every call's cost includes clock reads, and a program whose
    /// own work between calls hides them did not save them untraced: reconstruct reports that
    /// share of DP (`reconstruct::summary`).
    pub read_ticks: u16,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ClockSource {
    #[default]
    Tsc = 0,
    Monotonic = 1,
    /// Virtual time in the simulator.
    Virtual = 2,
}

/// One clock-offset measurement against rank 0 (ping-pong with the minimum round trip).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ClockSample {
    /// Local tick at which the offset holds (midpoint of the exchange, in our clock).
    pub local: u64,
    /// Rank 0's clock minus ours at `local`, in nanoseconds.
    pub offset_ns: f64,
    /// Round trip of the exchange kept, in nanoseconds (the error bound is half of it).
    pub rtt_ns: f64,
    /// What prompted the measurement.
    pub when: SampleKind,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum SampleKind {
    #[default]
    Init = 0,
    Suspension = 1,
    Finalize = 2,
}

/// Where a rank's span (end of `MPI_Init` to start of `MPI_Finalize`) ends, from its first
/// `FinalizeStart` and its first `AbnormalEnd`: the first, else the second. A rank that never
/// reached `MPI_Finalize` (killed at a job's time limit, crashed, `exit` without it) ends its span
/// where recording stopped, after everything it recorded. The one rule of every reader
/// (`trace::span`, the profile's statistics).
pub fn span_end<T>(finalize_start: Option<T>, abnormal_end: Option<T>) -> Option<T> {
    finalize_start.or(abnormal_end)
}

/// Something the recorder needs the reader to know about the completeness of the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Marker {
    /// The hard memory limit was reached and this rank flushed alone (timing may be perturbed).
    LocalFlush { time: u64, bytes: u64 },
    /// Recording stopped here (no disk space left, or an error); `lost_events` were not recorded.
    RecordingStopped { time: u64 },
    /// Events that could not be recorded since the previous marker.
    Lost { time: u64, events: u64 },
    /// The trace was written from a signal handler or an exit hook, not a clean `MPI_Finalize`.
    AbnormalEnd { time: u64, signal: i32 },
    /// `MPI_Init` completed (start of the measured span).
    InitDone { time: u64 },
    /// `MPI_Finalize` was entered (end of the measured span).
    FinalizeStart { time: u64 },
    /// The watchdog saw a call exceed its limit: what the call was waiting for, as far as its
    /// arguments say (`peer` within `comm`, `tag`; [`NO_RANK`]/[`NO_TAG`] when it has none).
    Stuck {
        time: u64,
        func: FunctionId,
        elapsed_ns: u64,
        comm: CommId,
        peer: i32,
        tag: i32,
    },
    /// The hard memory limit was reached between collectives, and this rank compressed its
    /// buffers in memory instead of writing them alone; the compressed chunks wait for the next
    /// flushing suspension. The time it took is recorder cost (charged to the next event).
    Compressed {
        time: u64,
        raw_bytes: u64,
        stored_bytes: u64,
    },
    /// The node (or the job's memory cgroup) had less memory available than this rank's next flush
    /// needs: it may swap. Written once per rank, with what would have helped said on stderr.
    MemoryLow {
        time: u64,
        available: u64,
        needed: u64,
    },
}

impl Marker {
    /// When it happened (ticks).
    pub fn time(&self) -> u64 {
        match *self {
            Marker::LocalFlush { time, .. }
            | Marker::RecordingStopped { time }
            | Marker::Lost { time, .. }
            | Marker::AbnormalEnd { time, .. }
            | Marker::InitDone { time }
            | Marker::FinalizeStart { time }
            | Marker::Stuck { time, .. }
            | Marker::Compressed { time, .. }
            | Marker::MemoryLow { time, .. } => time,
        }
    }

    /// A short name for views.
    pub fn label(&self) -> &'static str {
        match self {
            Marker::LocalFlush { .. } => "local flush",
            Marker::RecordingStopped { .. } => "recording stopped",
            Marker::Lost { .. } => "events lost",
            Marker::AbnormalEnd { .. } => "abnormal end",
            Marker::InitDone { .. } => "MPI_Init done",
            Marker::FinalizeStart { .. } => "MPI_Finalize entered",
            Marker::Stuck { .. } => "stuck call",
            Marker::Compressed { .. } => "compressed in memory",
            Marker::MemoryLow { .. } => "memory low",
        }
    }
}

/// Why a [`MemorySample`] was taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MemoryWhen {
    #[default]
    Init = 0,
    /// During a flushing suspension, after the write (inside the equalised pause).
    Suspension = 1,
    /// A few seconds passed since the last sample (taken at a decision point or a buffer growth).
    Periodic = 2,
    Finalize = 3,
    /// Right after the buffers were compressed in memory (`Marker::Compressed`).
    Compressed = 4,
    /// Taken by the rank's memory watcher thread, in its own stream, because the program made
    /// no sample for a few seconds (a long phase without MPI calls or decision points).
    Idle = 5,
    /// This rank's watcher became its node's memory watcher (the one that reads the node's
    /// figures for every rank of the node with `--threshold auto`) since its previous sample.
    NodeWatcher = 6,
}

/// [`MemorySample`] fields that were not available on this node.
pub const UNKNOWN_BYTES: u64 = u64::MAX;

/// What memory one rank and its node had at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MemorySample {
    pub time: u64,
    /// The process's resident set (`/proc/self/statm`), recorder included.
    pub rss_bytes: u64,
    /// What the recorder holds: its buffers' capacity plus compressed chunks waiting for a flush.
    pub recorder_bytes: u64,
    /// The compressed part of `recorder_bytes`.
    pub compressed_bytes: u64,
    /// The node's `MemAvailable` ([`UNKNOWN_BYTES`] if not read: only one rank per node reads the
    /// node-wide figures).
    pub node_available: u64,
    /// The memory cgroup's limit ([`UNKNOWN_BYTES`] when none applies or it was not read).
    pub cgroup_limit: u64,
    /// The cgroup's usage without its inactive file cache (the kernel reclaims that first).
    pub cgroup_usage: u64,
    /// Pages swapped out on the node since boot (`pswpout` of `/proc/vmstat`).
    pub swap_out_pages: u64,
    pub when: MemoryWhen,
}

impl MemorySample {
    /// Memory the node or the cgroup can still give, whichever is less; `None` if neither was read.
    pub fn available(&self) -> Option<u64> {
        let cgroup = (self.cgroup_limit != UNKNOWN_BYTES && self.cgroup_usage != UNKNOWN_BYTES)
            .then(|| self.cgroup_limit.saturating_sub(self.cgroup_usage));
        let node = (self.node_available != UNKNOWN_BYTES).then_some(self.node_available);
        match (cgroup, node) {
            (Some(c), Some(n)) => Some(c.min(n)),
            (c, n) => c.or(n),
        }
    }
}

/// Where `--threshold auto` took its S from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ThresholdBasis {
    /// A size the user gave (`--threshold 64MiB`).
    #[default]
    Fixed = 0,
    /// The memory cgroup's limit minus its usage.
    Cgroup = 1,
    /// The node's `MemAvailable`.
    Node = 2,
    /// Nothing could be read: the fallback size.
    Unknown = 3,
}

impl ThresholdBasis {
    pub fn name(self) -> &'static str {
        match self {
            ThresholdBasis::Fixed => "fixed",
            ThresholdBasis::Cgroup => "cgroup",
            ThresholdBasis::Node => "node",
            ThresholdBasis::Unknown => "unknown",
        }
    }
}

/// The threshold S a rank uses from `time` on, and why (written at `MPI_Init`, and again when
/// `--threshold auto` re-evaluates it to a different value at a suspension).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ThresholdChoice {
    pub time: u64,
    pub bytes: u64,
    pub basis: ThresholdBasis,
    /// The available memory it was computed from (0 for a fixed S).
    pub available: u64,
    /// Ranks sharing that memory (this node's ranks).
    pub ranks_on_node: u32,
}

/// Consecutive polls of one kind that found nothing (`MPI_Test` with flag 0, `MPI_Iprobe` without
/// a message, `MPI_Testsome` completing none, ...), folded into one record (chunk version 5): a
/// polling loop can otherwise make most of a trace. The first poll started at `start`, the last
/// one ended at `end`; in between the program ran its own code too, so the time inside MPI is
/// `busy`, not `end - start`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PollRun {
    pub func: FunctionId,
    pub comm: CommId,
    /// The source and tag a probe asked for ([`NO_RANK`]/[`NO_TAG`] for tests).
    pub peer: i32,
    pub tag: i32,
    pub start: u64,
    pub end: u64,
    /// Polls folded in (at least 1).
    pub count: u64,
    /// Ticks spent inside the MPI calls, summed over the polls.
    pub busy: u64,
    /// The recorder's cost charged to every poll but the last, in ticks: spent between `start`
    /// and `end`.
    pub inner_cost: u64,
    /// The recorder's cost charged to the last poll, spent after `end` (as [`MpiCall::cost`]).
    pub cost: u32,
}

impl PollRun {
    /// The run of one poll.
    pub fn of(call: &MpiCall) -> PollRun {
        PollRun {
            func: call.func,
            comm: call.comm,
            peer: call.peer,
            tag: call.tag,
            start: call.start,
            end: call.end,
            count: 1,
            busy: call.end.saturating_sub(call.start),
            inner_cost: 0,
            cost: call.cost,
        }
    }

    /// The run as views draw it: its first and its last poll (one if it holds one), each as long
    /// as the run's mean poll, so that a timeline shows where polling began and ended without
    /// claiming the time between them was spent in MPI. The last carries the run's costs.
    pub fn as_calls(&self) -> impl Iterator<Item = MpiCall> + use<> {
        let mean = self.busy / self.count.max(1);
        let call = |start: u64, end: u64, cost: u32| MpiCall {
            func: self.func,
            start,
            end,
            comm: self.comm,
            peer: self.peer,
            tag: self.tag,
            cost,
            root: NO_RANK,
            bytes: 0,
            request: NO_REQUEST,
            recv_bytes: 0,
            // Runs keep no call site (their record predates call sites).
            site: NO_SITE,
        };
        let first_end = self.start.saturating_add(mean).min(self.end);
        let last_start = self.end.saturating_sub(mean).max(first_end);
        let total_cost =
            u32::try_from(self.inner_cost.saturating_add(u64::from(self.cost))).unwrap_or(u32::MAX);
        let (first, last) = if self.count > 1 {
            (
                call(self.start, first_end, 0),
                Some(call(last_start, self.end, total_cost)),
            )
        } else {
            (call(self.start, self.end, total_cost), None)
        };
        std::iter::once(first).chain(last)
    }

    /// Folds in `call`, a poll that continues this run ([`PollRun::continued_by`]).
    pub fn extend(&mut self, call: &MpiCall) {
        self.end = call.end;
        self.count = self.count.saturating_add(1);
        self.busy = self
            .busy
            .saturating_add(call.end.saturating_sub(call.start));
        self.inner_cost = self.inner_cost.saturating_add(u64::from(self.cost));
        self.cost = call.cost;
    }

    /// Whether `call` continues this run (same function, communicator, source and tag).
    pub fn continued_by(&self, call: &MpiCall) -> bool {
        self.func == call.func
            && self.comm == call.comm
            && self.peer == call.peer
            && self.tag == call.tag
    }
}

/// Everything a trace can say, in the order it happened on one rank.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    Call(MpiCall),
    Completion(Completion),
    User(UserRecord),
    Region(Region),
    /// Boxed, as is `RankInfo`: both are rare and larger than a call, and every event is moved
    /// several times on its way through reconstruct (an `Event` is sized by its largest variant).
    Suspension(Box<Suspension>),
    /// A communicator's members, as world ranks, in communicator rank order.
    CommDef {
        id: CommId,
        members: Vec<u32>,
    },
    Clock(ClockSample),
    StringDef {
        id: StringId,
        text: String,
    },
    FunctionDef {
        id: FunctionId,
        name: String,
    },
    Marker(Marker),
    /// Who this rank is and where it ran; written once per rank, at `MPI_Init`.
    RankInfo(Box<RankInfo>),
    /// Which writer backend writes this rank's trace from here on, and why (fallbacks included).
    Writer(WriterUsed),
    /// The remote group of intercommunicator `id` (whose `CommDef` lists its local group), as
    /// world ranks in remote rank order: the peers of its point-to-point calls and its roots are
    /// ranks of this group. [`NOT_IN_WORLD`] for processes outside `MPI_COMM_WORLD` (spawned or
    /// connected ones).
    RemoteGroup {
        id: CommId,
        members: Vec<u32>,
    },
    /// `id` names an RMA window (its group is given by the `CommDef` of the same id, so target
    /// ranks translate like peers), created over communicator `comm` ([`NO_COMM`] if the window
    /// predates recording).
    WinDef {
        id: CommId,
        comm: CommId,
    },
    /// Memory of the rank and its node (chunk version 4).
    Memory(MemorySample),
    /// The threshold S in use (chunk version 4).
    Threshold(ThresholdChoice),
    /// Polls that found nothing, folded (chunk version 5).
    Polls(PollRun),
    /// A call site's definition (chunk version 6), before the first call that names it.
    CallSite(CallSite),
    /// The group argument of the `MPI_Win_post` or `MPI_Win_start` call on window `win` that
    /// follows it in the same stream (chunk version 7), as world ranks ([`NOT_IN_WORLD`] for
    /// processes outside `MPI_COMM_WORLD`): which targets an access epoch and which origins an
    /// exposure epoch name, so the epochs can be matched.
    EpochGroup {
        win: CommId,
        members: Vec<u32>,
    },
    /// How communicator (or window) `id`, defined by the `CommDef` just before it in the same
    /// stream, was made (chunk version 8): what identifies it on every member without the members'
    /// lists (which two communicators can share) and without the order in which a rank made its
    /// communicators (which MPI leaves free between different parents).
    CommOrigin {
        id: CommId,
        origin: CommOrigin,
    },
}

/// What identifies a communicator across its members: every member computes the same value
/// without communicating (FORMAT.md, `CommOrigin`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CommOrigin {
    /// Made by a call collective over `parent` (`MPI_Comm_dup`, `idup`, `split`, `create`,
    /// `split_type`, topology constructors, `Intercomm_merge`, window creation): the `index`-th
    /// such call on `parent` of this rank, counting from 0, calls that returned
    /// `MPI_COMM_NULL` here included. MPI orders these calls per parent the same on every member.
    Parent { parent: CommId, index: u32 },
    /// Made by `MPI_Comm_create_group(parent, group, tag)`, collective over the group only: the
    /// `index`-th call of this rank on `parent` with this `tag` and the same members.
    Group {
        parent: CommId,
        tag: i32,
        index: u32,
    },
    /// Made by `MPI_Comm_create_from_group(group, stringtag)` (MPI-4 sessions): the `index`-th
    /// call of this rank with this `tag` and the same members.
    Tagged { tag: String, index: u32 },
}

/// A member of a `CommDef` or `RemoteGroup` that is not a process of this `MPI_COMM_WORLD`.
pub const NOT_IN_WORLD: u32 = u32::MAX;

/// Identity of one rank's process, so a reader needs nothing beside the rank files to say where
/// each rank ran (`meta.json` describes only the launcher's side).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct RankInfo {
    /// Rank in `MPI_COMM_WORLD` and its size, as the rank saw them (equal to the file header's).
    pub rank: u32,
    pub world_size: u32,
    /// Process id on `host` (pids repeat across hosts and time namespaces do not change them).
    pub pid: u32,
    /// The node's host name (`gethostname`, i.e. the UTS namespace's name).
    pub host: String,
    /// First line of `MPI_Get_library_version` (e.g. `Open MPI v4.1.4, ...`, `MPICH Version: 4.0.2`).
    pub mpi_library: String,
    /// Identifies the run: the same string on every rank of one job (`evenflush run` sets it); empty
    /// when the recorder was preloaded without the launcher. Lets a reader refuse to mix runs.
    pub run_id: String,
}

/// A trace writer backend (`--writer`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum WriterId {
    #[default]
    Posix = 0,
    Uring = 1,
    MpiIo = 2,
    /// Collective MPI-IO into a group file (the aggregated layout).
    Group = 3,
}

impl WriterId {
    pub fn name(self) -> &'static str {
        match self {
            WriterId::Posix => "posix",
            WriterId::Uring => "uring",
            WriterId::MpiIo => "mpiio",
            WriterId::Group => "group",
        }
    }
}

/// Why a writer started writing a rank's trace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum WriterChange {
    /// The requested writer, opened at the first write.
    #[default]
    Opened = 0,
    /// The requested writer could not be used; `used` replaces it (the reason says why).
    Fallback = 1,
    /// MPI-IO cannot be used after `MPI_Finalize`: the rest of the trace goes to a further part
    /// file through posix. Expected with `--writer mpiio`, not a failure.
    FinalizeHandover = 2,
}

impl WriterChange {
    pub fn name(self) -> &'static str {
        match self {
            WriterChange::Opened => "opened",
            WriterChange::Fallback => "fallback",
            WriterChange::FinalizeHandover => "finalize-handover",
        }
    }
}

/// The writer actually used, recorded whenever one starts: when the first write opens it, when it
/// falls back to another, and when MPI-IO hands over to posix at `MPI_Finalize`. It is written
/// through the writer it names, into the part file `part`, and holds for that part and every
/// later part until the rank's next `Writer` event.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct WriterUsed {
    /// What the settings asked for.
    pub requested: WriterId,
    /// What writes the chunks from here on.
    pub used: WriterId,
    pub change: WriterChange,
    /// The part file (`rank-NNNNN.pK.evf`, K = `part`) the writer starts in.
    pub part: u32,
    /// Why, in words, for `Fallback` and `FinalizeHandover`; empty for `Opened`.
    pub reason: String,
}
