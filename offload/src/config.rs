//! Run settings: one table shared by the CLI flags and the `EVENFLUSH_*` environment variables.
//!
//! [`settings()`] is the single source of truth: every setting has its flag name (`--<flag>` on
//! `evenflush run`), its environment variable (what the recorder inside each rank reads), its
//! default and its help text. The launcher turns flags into environment variables; the recorder
//! calls [`Config::from_env`].

use std::fmt;
use std::path::PathBuf;

pub use format::naming::{check_out_pattern, expand_out, out_is_per_host};
use std::time::Duration;

/// How the recorder deals with a full buffer (architecture.md, "modes for comparison").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Equalised suspensions with Z computed each time (the paper's method).
    Dynamic,
    /// Suspensions with a fixed Z (`static-short` when nothing is flushed, `static-long` otherwise).
    Static,
    /// Like dynamic, but clock offsets are measured only at init.
    NoRemeasure,
    /// Each rank flushes alone when its buffer is full, as common tracers do.
    Local,
    /// Everything stays in memory until the end (the swap baseline).
    Off,
    /// Constant-memory statistics, no event trace.
    Profile,
}

impl Mode {
    pub const NAMES: &'static [&'static str] = &[
        "dynamic",
        "static",
        "noremeasure",
        "local",
        "off",
        "profile",
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Dynamic => "dynamic",
            Mode::Static => "static",
            Mode::NoRemeasure => "noremeasure",
            Mode::Local => "local",
            Mode::Off => "off",
            Mode::Profile => "profile",
        }
    }
}

/// How the ranks agree to flush (see `offload::suspension`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// A nonblocking OR-reduction started at one decision point and completed at the next; only a
    /// "flush" verdict pauses the program.
    Split,
    /// The paper's: a blocking OR-allreduce and an equalised suspension at every decision point.
    Blocking,
}

impl Decision {
    pub const NAMES: &'static [&'static str] = &["split", "blocking"];

    pub fn name(self) -> &'static str {
        match self {
            Decision::Split => "split",
            Decision::Blocking => "blocking",
        }
    }
}

/// Which collectives may start a suspension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SuspendAt {
    Barrier,
    Collectives,
}

/// The backend that writes trace chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Writer {
    Posix,
    Uring,
    MpiIo,
}

/// How a run's trace is spread over files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// A file per rank (`rank-NNNNN.evf`): simplest, and what small runs want.
    Rank,
    /// A file per node (`group-NNNNN.evf`), written collectively by the node's ranks.
    Node,
    /// One file for the whole job, written collectively by every rank (needs an output
    /// directory that every node sees).
    Shared,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Rank => "rank",
            Layout::Node => "node",
            Layout::Shared => "shared",
        }
    }
}

/// How the offsets to rank 0 are measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ClockScheme {
    /// The paper's: rank 0 ping-pongs with every other rank in turn. O(P) time at rank 0.
    #[default]
    Sequential,
    /// Every rank ping-pongs with its children in the binomial tree of [`crate::tree_broadcast`]
    /// (all parents at once), and offsets compose down the tree: C_child = C_parent + edge. Takes
    /// about ⌈log2 P⌉ measurements one after the other. The error bound grows with the depth: each
    /// rank knows the sum of the half round trips on its path
    /// ([`ClockSync::error_bound_ns`]), and the suspension subtracts it from its start, so that
    /// rank 0 never sees a start later than the true one.
    Tree,
}

impl ClockScheme {
    pub const NAMES: &'static [&'static str] = &["sequential", "tree"];

    pub fn name(self) -> &'static str {
        match self {
            ClockScheme::Sequential => "sequential",
            ClockScheme::Tree => "tree",
        }
    }

    pub fn from_name(name: &str) -> Option<ClockScheme> {
        match name.trim().to_ascii_lowercase().as_str() {
            "sequential" => Some(ClockScheme::Sequential),
            "tree" => Some(ClockScheme::Tree),
            _ => None,
        }
    }
}

/// Every setting, parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Output directories; ranks rotate to the next one when a disk fills.
    pub out: Vec<PathBuf>,
    /// Buffer size S that makes a rank ask for a suspension, in bytes (with `threshold_auto`, the
    /// fallback used when no memory figure can be read).
    pub threshold: u64,
    /// `--threshold auto`: S is sized from the memory free on the node (recorder::back::threshold).
    pub threshold_auto: bool,
    /// Hard memory limit for the recorder's buffers, in bytes.
    pub limit: u64,
    pub mode: Mode,
    pub suspend_at: SuspendAt,
    /// Consider a suspension only at every N-th eligible collective.
    pub suspend_every: u64,
    pub static_short: Duration,
    pub static_long: Duration,
    pub writer: Writer,
    pub layout: Layout,
    pub zstd_level: i32,
    /// `--include` / `--exclude` rules (recorder::front::filter); empty include = everything.
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    /// A call running longer than this is reported stuck; zero disables the watchdog.
    pub watchdog: Duration,
    pub watchdog_abort: bool,
    /// Record where the program called each MPI function (`MpiCall::site`).
    pub callsites: bool,
    /// How long `MPI_Abort` and a crash (SIGSEGV, SIGBUS, SIGABRT) wait for the trace to be
    /// written before the process goes on to end: the job must end even when the disk hangs.
    pub abort_flush_limit: Duration,
    /// Ping-pong exchanges per clock-offset measurement (the minimum round trip is kept).
    pub clock_samples: u32,
    /// How clock offsets are measured (see [`ClockScheme`]).
    pub clock_scheme: ClockScheme,
    /// How the ranks agree to flush.
    pub decision: Decision,
    /// Split decision: the time aimed for between two decision points.
    pub decision_interval: Duration,
}

/// One row of the settings table.
pub struct Setting {
    /// Flag name without the leading dashes (`--threshold`).
    pub flag: &'static str,
    /// Environment variable read by the recorder.
    pub env: &'static str,
    /// Default, in the same syntax a user would type.
    pub default: &'static str,
    pub help: &'static str,
    apply: fn(&mut Config, &str) -> Result<(), String>,
}

impl Setting {
    /// Parses `value` into `config`'s field for this setting.
    pub fn apply(&self, config: &mut Config, value: &str) -> Result<(), ConfigError> {
        (self.apply)(config, value).map_err(|reason| ConfigError {
            setting: self.flag,
            env: self.env,
            value: value.to_string(),
            reason,
        })
    }
}

impl fmt::Debug for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Setting")
            .field("flag", &self.flag)
            .field("env", &self.env)
            .field("default", &self.default)
            .finish()
    }
}

/// A setting whose value could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub setting: &'static str,
    pub env: &'static str,
    pub value: String,
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid value {:?} for --{} ({}): {}",
            self.value, self.setting, self.env, self.reason
        )
    }
}

impl std::error::Error for ConfigError {}

/// Comma-separated filter rules, blanks dropped.
fn filter_rules(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(String::from)
        .collect()
}

/// `--threshold auto`'s S when no memory figure can be read: the fixed default.
pub const AUTO_FALLBACK_THRESHOLD: u64 = 64 << 20;

/// Where the trace goes when no directory is given: `--out`'s default, and the recorder's fallback
/// for a configuration built without the table.
pub const DEFAULT_OUT: &str = "evenflush-trace";

static SETTINGS: &[Setting] = &[
    Setting {
        flag: "out",
        env: "EVENFLUSH_OUT",
        default: DEFAULT_OUT,
        help: "Output directories, comma-separated; ranks move on to the next one when a disk fills. \
               %h is replaced by each rank's host name (node-local output, see `evenflush collect`), %% by %",
        apply: |c, v| {
            let dirs: Vec<PathBuf> = v
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(PathBuf::from)
                .collect();
            if dirs.is_empty() {
                return Err("at least one directory is needed".into());
            }
            for d in &dirs {
                check_out_pattern(d)?;
            }
            c.out = dirs;
            Ok(())
        },
    },
    Setting {
        flag: "threshold",
        env: "EVENFLUSH_THRESHOLD",
        default: "auto",
        help: "Buffer size S at which a rank asks for an offload suspension (e.g. 64MiB, 1G, 100MB), \
               or auto: a quarter of the memory free at start-up (the job's memory cgroup limit if it has \
               one, else the node's MemAvailable) shared by the node's ranks, re-evaluated as the \
               program allocates, at most half of --limit",
        apply: |c, v| {
            if v.trim().eq_ignore_ascii_case("auto") {
                c.threshold_auto = true;
                c.threshold = AUTO_FALLBACK_THRESHOLD;
            } else {
                c.threshold_auto = false;
                c.threshold = parse_size(v)?;
            }
            Ok(())
        },
    },
    Setting {
        flag: "limit",
        env: "EVENFLUSH_LIMIT",
        default: "1GiB",
        help: "Hard limit for the recorder's memory; reaching it forces a local flush (reported in the trace)",
        apply: |c, v| {
            c.limit = parse_size(v)?;
            Ok(())
        },
    },
    Setting {
        flag: "mode",
        env: "EVENFLUSH_MODE",
        default: "dynamic",
        help: "dynamic | static | noremeasure | local | off | profile",
        apply: |c, v| {
            c.mode = match v.trim().to_ascii_lowercase().as_str() {
                "dynamic" => Mode::Dynamic,
                "static" => Mode::Static,
                "noremeasure" => Mode::NoRemeasure,
                "local" => Mode::Local,
                "off" => Mode::Off,
                "profile" => Mode::Profile,
                _ => return Err(format!("expected one of {}", Mode::NAMES.join(", "))),
            };
            Ok(())
        },
    },
    Setting {
        flag: "suspend-at",
        env: "EVENFLUSH_SUSPEND_AT",
        default: "collectives",
        help: "Which blocking collectives on the whole world may start a suspension: barrier | collectives",
        apply: |c, v| {
            c.suspend_at = match v.trim().to_ascii_lowercase().as_str() {
                "barrier" => SuspendAt::Barrier,
                "collectives" => SuspendAt::Collectives,
                _ => return Err("expected barrier or collectives".into()),
            };
            Ok(())
        },
    },
    Setting {
        flag: "suspend-every",
        env: "EVENFLUSH_SUSPEND_EVERY",
        default: "1",
        help: "Consider a suspension only at every N-th eligible collective",
        apply: |c, v| {
            let n: u64 = v
                .trim()
                .parse()
                .map_err(|_| "expected a positive integer".to_string())?;
            if n == 0 {
                return Err("must be at least 1".into());
            }
            c.suspend_every = n;
            Ok(())
        },
    },
    Setting {
        flag: "static-short",
        env: "EVENFLUSH_STATIC_SHORT",
        default: "20ms",
        help: "Mode static: suspension time when no rank flushes (e.g. 20ms)",
        apply: |c, v| {
            c.static_short = parse_duration(v)?;
            Ok(())
        },
    },
    Setting {
        flag: "static-long",
        env: "EVENFLUSH_STATIC_LONG",
        default: "40s",
        help: "Mode static: suspension time when some rank flushes (e.g. 40s)",
        apply: |c, v| {
            c.static_long = parse_duration(v)?;
            Ok(())
        },
    },
    Setting {
        flag: "writer",
        env: "EVENFLUSH_WRITER",
        default: "posix",
        help: "Trace writer backend: posix | uring | mpiio",
        apply: |c, v| {
            c.writer = match v.trim().to_ascii_lowercase().as_str() {
                "posix" => Writer::Posix,
                "uring" | "io_uring" => Writer::Uring,
                "mpiio" | "mpi-io" => Writer::MpiIo,
                _ => return Err("expected posix, uring or mpiio".into()),
            };
            Ok(())
        },
    },
    Setting {
        flag: "layout",
        env: "EVENFLUSH_LAYOUT",
        default: "rank",
        help: "Trace files: rank (one per rank) | node (one per node) | shared (one for the job); \
               node and shared are written with collective MPI-IO at each flush, for thousands \
               of ranks on a parallel file system",
        apply: |c, v| {
            c.layout = match v.trim().to_ascii_lowercase().as_str() {
                "rank" => Layout::Rank,
                "node" => Layout::Node,
                "shared" => Layout::Shared,
                _ => return Err("expected rank, node or shared".into()),
            };
            Ok(())
        },
    },
    Setting {
        flag: "zstd-level",
        env: "EVENFLUSH_ZSTD_LEVEL",
        default: "3",
        help: "zstd compression level of trace chunks (negative = faster)",
        apply: |c, v| {
            let level: i32 = v
                .trim()
                .parse()
                .map_err(|_| "expected an integer".to_string())?;
            if !(-131072..=22).contains(&level) {
                return Err("zstd levels range from -131072 to 22".into());
            }
            c.zstd_level = level;
            Ok(())
        },
    },
    Setting {
        flag: "include",
        env: "EVENFLUSH_INCLUDE",
        default: "",
        help: "Record only these MPI functions: comma-separated names, globs (MPI_*send*) or \
               classes (class:collective-blocking, as in recorder/mpi_functions.tsv); empty = all. \
               MPI_Init, MPI_Finalize and MPI_Pcontrol are always recorded",
        apply: |c, v| {
            c.include = filter_rules(v);
            Ok(())
        },
    },
    Setting {
        flag: "exclude",
        env: "EVENFLUSH_EXCLUDE",
        default: "",
        help: "Do not record these MPI functions (same rules as --include), e.g. \
               MPI_Test*,MPI_Iprobe for polling loops. Their requests are still tracked, but the \
               messages they send or receive cannot be matched. MPI_Pcontrol(0) pauses recording \
               in the program itself, any other level resumes it",
        apply: |c, v| {
            c.exclude = filter_rules(v);
            Ok(())
        },
    },
    Setting {
        flag: "watchdog",
        env: "EVENFLUSH_WATCHDOG",
        default: "0",
        help: "Report an MPI call running longer than this (seconds, or a duration like 90s); 0 = off",
        apply: |c, v| {
            c.watchdog = parse_duration(v)?;
            Ok(())
        },
    },
    Setting {
        flag: "watchdog-abort",
        env: "EVENFLUSH_WATCHDOG_ABORT",
        default: "false",
        help: "Write the trace and abort the job when the watchdog fires",
        apply: |c, v| {
            c.watchdog_abort = parse_bool(v)?;
            Ok(())
        },
    },
    Setting {
        flag: "callsites",
        env: "EVENFLUSH_CALLSITES",
        default: "false",
        help: "Record where the program called each MPI function (its return address), so that `evenflush report --callsites` attributes time and bytes to source lines; costs a few ns per call",
        apply: |c, v| {
            c.callsites = parse_bool(v)?;
            Ok(())
        },
    },
    Setting {
        flag: "abort-flush-limit",
        env: "EVENFLUSH_ABORT_FLUSH_LIMIT",
        default: "10s",
        help: "How long MPI_Abort, a crash (SIGSEGV, SIGBUS, SIGABRT) or an application's own SIGTERM/SIGINT handler waits for the trace to be written before the process goes on, and how long a rank killed by SIGTERM/SIGINT along with the others waits for them to finish writing before it dies (seconds, or a duration like 500ms); what is not written by then is lost",
        apply: |c, v| {
            c.abort_flush_limit = parse_duration(v)?;
            Ok(())
        },
    },
    Setting {
        flag: "clock-samples",
        env: "EVENFLUSH_CLOCK_SAMPLES",
        default: "10",
        help: "Ping-pong exchanges per clock-offset measurement k (the fastest is kept) at init and finalize; at most 3 inside a suspension, where every exchange lengthens the pause",
        apply: |c, v| {
            let k: u32 = v
                .trim()
                .parse()
                .map_err(|_| "expected a positive integer".to_string())?;
            if k == 0 {
                return Err("must be at least 1".into());
            }
            c.clock_samples = k;
            Ok(())
        },
    },
    Setting {
        flag: "clock-scheme",
        env: "EVENFLUSH_CLOCK_SCHEME",
        default: "tree",
        help: "Clock-offset measurement: tree (parents measure children in parallel; O(log P)) | sequential (the paper: rank 0 ping-pongs every rank in turn; O(P))",
        apply: |c, v| {
            c.clock_scheme = ClockScheme::from_name(v)
                .ok_or_else(|| "expected sequential or tree".to_string())?;
            Ok(())
        },
    },
    Setting {
        flag: "decision",
        env: "EVENFLUSH_DECISION",
        default: "split",
        help: "How ranks agree to flush: split (a nonblocking OR-reduction completed at the next decision point; collectives that do not flush are not paused) | blocking (the paper: a blocking OR-allreduce and a short equalised suspension at every decision point)",
        apply: |c, v| {
            c.decision = match v.trim().to_ascii_lowercase().as_str() {
                "split" => Decision::Split,
                "blocking" => Decision::Blocking,
                _ => return Err("expected split or blocking".to_string()),
            };
            Ok(())
        },
    },
    Setting {
        flag: "decision-interval",
        env: "EVENFLUSH_DECISION_INTERVAL",
        default: "100ms",
        help: "Split decision: time aimed for between decision points (rank 0 sets how many collectives apart they are); a flush starts at most about two intervals after a buffer passed the threshold. 0 = every eligible collective. Nonblocking reductions progress only inside MPI calls, so on a slow network (ms per message) a short interval makes decision points wait for them",
        apply: |c, v| {
            c.decision_interval = parse_duration(v)?;
            Ok(())
        },
    },
];

/// The settings table (flag, env var, default, help), in display order.
pub fn settings() -> &'static [Setting] {
    SETTINGS
}

impl Default for Config {
    /// Every setting at its default.
    fn default() -> Self {
        Config::from_lookup(|_| None).expect("defaults in the settings table must parse")
    }
}

impl Config {
    /// Reads every `EVENFLUSH_*` variable; unset ones take their default.
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_lookup(|name| std::env::var(name).ok())
    }

    /// Like [`Config::from_env`] with a custom variable source (tests, the launcher).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let mut config = Config {
            out: Vec::new(),
            threshold: 0,
            threshold_auto: false,
            limit: 0,
            mode: Mode::Dynamic,
            suspend_at: SuspendAt::Collectives,
            suspend_every: 1,
            static_short: Duration::ZERO,
            static_long: Duration::ZERO,
            writer: Writer::Posix,
            layout: Layout::Rank,
            zstd_level: 3,
            include: Vec::new(),
            exclude: Vec::new(),
            watchdog: Duration::ZERO,
            watchdog_abort: false,
            callsites: false,
            abort_flush_limit: Duration::ZERO,
            clock_samples: 1,
            clock_scheme: ClockScheme::Tree,
            decision: Decision::Split,
            decision_interval: Duration::ZERO,
        };
        for s in SETTINGS {
            let value = lookup(s.env).filter(|v| !v.trim().is_empty());
            s.apply(&mut config, value.as_deref().unwrap_or(s.default))?;
        }
        if config.threshold_auto {
            config.threshold = config.threshold.min(config.limit);
        }
        if config.limit < config.threshold {
            return Err(ConfigError {
                setting: "limit",
                env: "EVENFLUSH_LIMIT",
                value: config.limit.to_string(),
                reason: format!(
                    "the hard limit must not be below the threshold ({} bytes)",
                    config.threshold
                ),
            });
        }
        if config.layout != Layout::Rank && config.mode == Mode::Local {
            return Err(ConfigError {
                setting: "layout",
                env: "EVENFLUSH_LAYOUT",
                value: config.layout.name().into(),
                reason: "mode local flushes each rank alone, but a node or shared file is written \
                         by its ranks together; use --layout rank with --mode local"
                    .into(),
            });
        }
        if config.layout == Layout::Shared && config.out.iter().any(|d| out_is_per_host(d)) {
            return Err(ConfigError {
                setting: "layout",
                env: "EVENFLUSH_LAYOUT",
                value: "shared".into(),
                reason: "one file for the whole job needs one directory that every node sees, \
                         but the output directory names the host (%h); use --layout node for \
                         node-local directories"
                    .into(),
            });
        }
        Ok(config)
    }
}

/// Parses a byte size: plain bytes, binary units (`KiB`, `MiB`, `GiB`, `TiB`, and the single
/// letters `K`, `M`, `G`, `T`, as in most HPC tools) or decimal units (`kB`, `MB`, `GB`, `TB`).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = (&t[..split], t[split..].trim());
    if number.is_empty() {
        return Err(format!("{t:?} is not a size (e.g. 64MiB, 1G, 100MB, 4096)"));
    }
    let multiplier: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => {
            return Err(format!(
                "unknown size unit {unit:?} (use B, KiB, MiB, GiB, TiB, K, M, G, T, kB, MB, GB, TB)"
            ));
        }
    };
    if let Ok(whole) = number.parse::<u64>() {
        return whole
            .checked_mul(multiplier)
            .ok_or_else(|| format!("{t:?} is too large"));
    }
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{number:?} is not a number"))?;
    let bytes = value * multiplier as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(format!("{t:?} is too large"));
    }
    Ok(bytes.round() as u64)
}

/// Parses a duration: `20ms`, `40s`, `1.5s`, `250us`, `100ns`, `2m`, `1h`; a plain number is seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = (&t[..split], t[split..].trim());
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{t:?} is not a duration (e.g. 20ms, 40s, 1.5s)"))?;
    let seconds_per_unit = match unit.to_ascii_lowercase().as_str() {
        "" | "s" | "sec" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "ns" => 1e-9,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => {
            return Err(format!(
                "unknown duration unit {unit:?} (use ns, us, ms, s, min, h)"
            ));
        }
    };
    let secs = value * seconds_per_unit;
    Duration::try_from_secs_f64(secs).map_err(|_| format!("{t:?} is out of range"))
}

/// Parses a yes/no value.
pub fn parse_bool(text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        other => Err(format!(
            "{other:?} is not a yes/no value (true/false, yes/no, on/off, 1/0)"
        )),
    }
}

/// This machine's host name as the kernel reports it for this process (its UTS namespace), the
/// name `%h` stands for and a rank's `RankInfo` record carries.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into the buffer we own.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..len]).into_owned()
}

/// The shared-memory page through which the ranks of run `run` on `host` share one memory
/// watcher (recorder `back::node_share`), and the start of every such name of the run, which
/// `evenflush run` removes after the job in case ranks died before they did.
pub fn memory_page_path(run: &str, host: &str) -> String {
    format!("{}{}", memory_page_prefix(run), file_safe(host))
}

pub fn memory_page_prefix(run: &str) -> String {
    format!("/dev/shm/evenflush-mem-{}--", file_safe(run))
}

fn file_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn out_patterns_expand_the_host_and_reject_unknown_escapes() {
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(
            expand_out(&p("/scratch/%h/trace"), "nodeB"),
            p("/scratch/nodeB/trace")
        );
        assert_eq!(expand_out(&p("t-%h-%%-%h"), "a"), p("t-a-%-a"));
        assert_eq!(expand_out(&p("/x/%h"), "evil/../up"), p("/x/evil_.._up"));
        assert_eq!(expand_out(&p("/x/%h"), ".."), p("/x/unknown-host"));
        assert_eq!(expand_out(&p("/plain"), "a"), p("/plain"));
        assert!(out_is_per_host(&p("/a/%h")));
        assert!(!out_is_per_host(&p("/a/%%h")));
        assert!(check_out_pattern(&p("/a/%h/%%")).is_ok());
        assert!(check_out_pattern(&p("/a/%H")).unwrap_err().contains("%H"));
        assert!(
            check_out_pattern(&p("/a/%"))
                .unwrap_err()
                .contains("lone %")
        );
        let err = Config::from_lookup(|k| (k == "EVENFLUSH_OUT").then(|| "/t/%r".to_string()))
            .unwrap_err();
        assert_eq!(err.env, "EVENFLUSH_OUT");
        assert!(!hostname().is_empty());
    }

    #[test]
    fn sizes_in_all_accepted_spellings() {
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("512KiB"), Ok(512 << 10));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("100MB"), Ok(100_000_000));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size(" 2 mib "), Ok(2 << 20));
        assert_eq!(parse_size("1.5KiB"), Ok(1536));
    }

    #[test]
    fn bad_sizes_are_rejected_with_a_reason() {
        for bad in ["", "MiB", "12XB", "-5", "99999999999999999999TiB"] {
            let err = parse_size(bad).expect_err(bad);
            assert!(!err.is_empty());
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("20ms"), Ok(Duration::from_millis(20)));
        assert_eq!(parse_duration("40s"), Ok(Duration::from_secs(40)));
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("2min"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5 fortnights").is_err());
    }

    #[test]
    fn bools() {
        assert_eq!(parse_bool("yes"), Ok(true));
        assert_eq!(parse_bool("OFF"), Ok(false));
        assert!(parse_bool("maybe").is_err());
    }

    #[test]
    fn defaults_come_from_the_table() {
        let c = Config::default();
        for s in settings() {
            let mut fresh = c.clone();
            s.apply(&mut fresh, s.default).unwrap();
            assert_eq!(
                fresh, c,
                "default of --{} does not match Config::default()",
                s.flag
            );
        }
        assert_eq!((c.threshold, c.threshold_auto), (64 << 20, true));
        assert_eq!(c.mode, Mode::Dynamic);
    }

    #[test]
    fn env_overrides_and_errors_name_the_variable() {
        let vars: HashMap<&str, &str> = [
            ("EVENFLUSH_OUT", "/a,/b"),
            ("EVENFLUSH_MODE", "off"),
            ("EVENFLUSH_LIMIT", "2GiB"),
            ("EVENFLUSH_ZSTD_LEVEL", "-3"),
        ]
        .into_iter()
        .collect();
        let c = Config::from_lookup(|k| vars.get(k).map(|v| v.to_string())).unwrap();
        assert_eq!(c.out, vec![PathBuf::from("/a"), PathBuf::from("/b")]);
        assert_eq!(c.mode, Mode::Off);
        assert_eq!(c.limit, 2 << 30);
        assert_eq!(c.zstd_level, -3);

        let err = Config::from_lookup(|k| (k == "EVENFLUSH_MODE").then(|| "fast".to_string()))
            .unwrap_err();
        assert_eq!(err.env, "EVENFLUSH_MODE");
        assert!(err.to_string().contains("dynamic"), "{err}");

        let fixed_above_limit = |k: &str| match k {
            "EVENFLUSH_LIMIT" => Some("1MiB".to_string()),
            "EVENFLUSH_THRESHOLD" => Some("64MiB".to_string()),
            _ => None,
        };
        let err = Config::from_lookup(fixed_above_limit).unwrap_err();
        assert_eq!(err.setting, "limit");
        // Auto's fallback follows the limit down instead.
        let c =
            Config::from_lookup(|k| (k == "EVENFLUSH_LIMIT").then(|| "1MiB".to_string())).unwrap();
        assert_eq!((c.threshold, c.threshold_auto), (1 << 20, true));
    }

    #[test]
    fn flags_and_env_names_are_unique_and_consistent() {
        let mut seen = std::collections::HashSet::new();
        for s in settings() {
            assert!(seen.insert(s.flag), "duplicate flag {}", s.flag);
            let expected = format!(
                "EVENFLUSH_{}",
                s.flag.to_ascii_uppercase().replace('-', "_")
            );
            assert_eq!(s.env, expected);
            assert!(!s.help.is_empty());
        }
    }
}
