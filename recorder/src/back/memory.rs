//! What memory this rank and its node have: the `Memory` records of the trace, the figures
//! `--threshold auto` sizes S from, and the warning before a flush would push the node into swap.
//!
//! Cost: every file is opened once and re-read with `pread`, which skips the path lookup (an
//! `open` of a `/proc` file costs more than reading it). The per-rank figure (`/proc/self/statm`,
//! about 1 µs) is read by the rank's own thread at each sample; the node-wide ones
//! (`/proc/meminfo`, `/proc/vmstat`, the cgroup's files, 15–35 µs together) by the watcher thread
//! of one rank per node (with `--threshold auto` shared through `node_share`), which publishes
//! them in atomics. Samples are only ever taken at init, inside flushing suspensions, at decision
//! points or buffer growths at most every [`PERIOD_NS`], at finalize, and by the watcher thread
//! when none was taken for [`PERIOD_NS`]: never on the per-call path.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::back::node::{NodeMemory, NodePlace};
use crate::back::node_share::NodeShare;
use std::time::Duration;

use format::{MemorySample, MemoryWhen, UNKNOWN_BYTES};

/// At least this long between two periodic samples (ns of the recorder's clock).
pub const PERIOD_NS: u64 = 2_000_000_000;

/// A cgroup v1 limit this large means "no limit" (the kernel reports `PAGE_COUNTER_MAX` pages).
const V1_NO_LIMIT: u64 = 1 << 62;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CgroupVersion {
    V1,
    V2,
}

/// The memory cgroup the process is in, with its files open.
struct Cgroup {
    version: CgroupVersion,
    usage: File,
    stat: File,
    /// v2 only: `memory.max` of this cgroup and of every ancestor that has one (the tightest
    /// applies). v1 reads `hierarchical_memory_limit` from `memory.stat` instead.
    limits: Vec<File>,
}

/// Open files for sampling; `None` entries could not be opened (and read as unknown).
pub struct Sampler {
    statm: Option<File>,
    meminfo: Option<File>,
    vmstat: Option<File>,
    cgroup: Option<Cgroup>,
    page_size: u64,
    buf: Vec<u8>,
}

impl Sampler {
    pub fn open() -> Sampler {
        let open = |p: &str| File::open(p).ok();
        // SAFETY: sysconf only reads a system constant.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        Sampler {
            statm: open("/proc/self/statm"),
            meminfo: open("/proc/meminfo"),
            vmstat: open("/proc/vmstat"),
            cgroup: find_cgroup(),
            page_size: if page > 0 { page as u64 } else { 4096 },
            buf: vec![0; 8192],
        }
    }

    fn read<'a>(buf: &'a mut Vec<u8>, file: &File) -> Option<&'a str> {
        loop {
            let n = file.read_at(buf, 0).ok()?;
            if n < buf.len() {
                return std::str::from_utf8(&buf[..n]).ok();
            }
            // The file outgrew the buffer: read it whole next time round.
            let len = buf.len() * 2;
            buf.resize(len, 0);
        }
    }

    /// This process's resident set.
    pub fn rss_bytes(&mut self) -> u64 {
        let page = self.page_size;
        self.statm
            .as_ref()
            .and_then(|f| Self::read(&mut self.buf, f))
            .and_then(|text| text.split_ascii_whitespace().nth(1)?.parse::<u64>().ok())
            .map_or(UNKNOWN_BYTES, |pages| pages * page)
    }

    /// The node's and cgroup's figures; `swap` also reads `/proc/vmstat` (the costliest file).
    pub fn node(&mut self, swap: bool) -> NodeMemory {
        let mut out = NodeMemory::UNKNOWN;
        if let Some(text) = self
            .meminfo
            .as_ref()
            .and_then(|f| Self::read(&mut self.buf, f))
        {
            out.node_available = field_kib(text, "MemAvailable:").unwrap_or(UNKNOWN_BYTES);
        }
        if swap
            && let Some(text) = self
                .vmstat
                .as_ref()
                .and_then(|f| Self::read(&mut self.buf, f))
        {
            out.swap_out_pages = field(text, "pswpout").unwrap_or(UNKNOWN_BYTES);
        }
        if let Some(cg) = &self.cgroup {
            let usage =
                Self::read(&mut self.buf, &cg.usage).and_then(|t| t.trim().parse::<u64>().ok());
            let (inactive, v1_limit) = match Self::read(&mut self.buf, &cg.stat) {
                Some(stat) => match cg.version {
                    CgroupVersion::V1 => (
                        field(stat, "total_inactive_file"),
                        field(stat, "hierarchical_memory_limit"),
                    ),
                    CgroupVersion::V2 => (field(stat, "inactive_file"), None),
                },
                None => (None, None),
            };
            let limit = match cg.version {
                CgroupVersion::V1 => v1_limit.filter(|&l| l < V1_NO_LIMIT),
                CgroupVersion::V2 => cg
                    .limits
                    .iter()
                    .filter_map(|f| {
                        let t = Self::read(&mut self.buf, f)?;
                        t.trim().parse::<u64>().ok() // "max" does not parse: no limit
                    })
                    .min(),
            };
            if let (Some(limit), Some(usage)) = (limit, usage) {
                out.cgroup_limit = limit;
                out.cgroup_usage = usage.saturating_sub(inactive.unwrap_or(0));
            }
        }
        out
    }
}

/// A `name value` line's value (`/proc/vmstat`, `memory.stat`).
fn field(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let mut words = line.split_ascii_whitespace();
        if words.next()? != name {
            return None;
        }
        words.next()?.parse().ok()
    })
}

/// A `/proc/meminfo` line's value, in bytes.
fn field_kib(text: &str, name: &str) -> Option<u64> {
    field(text, name).map(|kib| kib * 1024)
}

/// This process's memory cgroup, from `/proc/self/cgroup` and the mount table; `None` when the
/// files are missing (no cgroup file system mounted, as in some containers).
fn find_cgroup() -> Option<Cgroup> {
    let membership = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let v1_path = membership.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == "memory")
            .then(|| path.to_string())
    });
    let (version, path) = match v1_path {
        Some(p) => (CgroupVersion::V1, p),
        None => (
            CgroupVersion::V2,
            membership
                .lines()
                .find_map(|l| l.strip_prefix("0::").map(str::to_string))?,
        ),
    };
    let (mount_root, mount_point) = mounts.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let mut fs = after.split_ascii_whitespace();
        let (fstype, _source, options) = (fs.next()?, fs.next()?, fs.next().unwrap_or(""));
        let matches = match version {
            CgroupVersion::V1 => fstype == "cgroup" && options.split(',').any(|o| o == "memory"),
            CgroupVersion::V2 => fstype == "cgroup2",
        };
        let fields: Vec<&str> = before.split_ascii_whitespace().collect();
        if !matches {
            return None;
        }
        Some((fields.get(3)?.to_string(), fields.get(4)?.to_string()))
    })?;
    let relative = path
        .strip_prefix(mount_root.trim_end_matches('/'))
        .unwrap_or(&path)
        .trim_start_matches('/');
    let dir = Path::new(&mount_point).join(relative);
    match version {
        CgroupVersion::V1 => Some(Cgroup {
            version,
            usage: File::open(dir.join("memory.usage_in_bytes")).ok()?,
            stat: File::open(dir.join("memory.stat")).ok()?,
            limits: Vec::new(),
        }),
        CgroupVersion::V2 => {
            let mut limits = Vec::new();
            let mut at: Option<PathBuf> = Some(dir.clone());
            while let Some(d) = at {
                if let Ok(f) = File::open(d.join("memory.max")) {
                    limits.push(f);
                }
                at = d
                    .parent()
                    .filter(|p| p.starts_with(&mount_point) && *p != Path::new(&mount_point))
                    .map(Path::to_path_buf);
            }
            Some(Cgroup {
                version,
                usage: File::open(dir.join("memory.current")).ok()?,
                stat: File::open(dir.join("memory.stat")).ok()?,
                limits,
            })
        }
    }
}

/// The node's figures as the watcher thread last read them ([`UNKNOWN_BYTES`] until it has).
static NODE_AVAILABLE: AtomicU64 = AtomicU64::new(UNKNOWN_BYTES);
static CGROUP_LIMIT: AtomicU64 = AtomicU64::new(UNKNOWN_BYTES);
static CGROUP_USAGE: AtomicU64 = AtomicU64::new(UNKNOWN_BYTES);
static SWAP_OUT_PAGES: AtomicU64 = AtomicU64::new(UNKNOWN_BYTES);

fn publish(n: &NodeMemory) {
    NODE_AVAILABLE.store(n.node_available, Ordering::Relaxed);
    CGROUP_LIMIT.store(n.cgroup_limit, Ordering::Relaxed);
    CGROUP_USAGE.store(n.cgroup_usage, Ordering::Relaxed);
    SWAP_OUT_PAGES.store(n.swap_out_pages, Ordering::Relaxed);
}

/// The node's figures as last published (all unknown on ranks that do not read them).
pub fn node() -> NodeMemory {
    NodeMemory {
        node_available: NODE_AVAILABLE.load(Ordering::Relaxed),
        cgroup_limit: CGROUP_LIMIT.load(Ordering::Relaxed),
        cgroup_usage: CGROUP_USAGE.load(Ordering::Relaxed),
        swap_out_pages: SWAP_OUT_PAGES.load(Ordering::Relaxed),
    }
}

/// How often the watcher re-reads the node's figures: `--threshold auto` follows the program's
/// allocations closely (they happen while the buffers fill); otherwise a sample every few
/// seconds needs nothing fresher.
pub const WATCH_AUTO: Duration = Duration::from_millis(50);
pub const WATCH_PLAIN: Duration = Duration::from_millis(500);

/// What the ranks' own threads read at a sample: only `/proc/self/statm`.
struct Own {
    sampler: Sampler,
    place: NodePlace,
}

static OWN: Mutex<Option<Own>> = Mutex::new(None);
/// Recorder clock ticks of the last sample, and the ticks in [`PERIOD_NS`].
static LAST_SAMPLE: AtomicU64 = AtomicU64::new(0);
static PERIOD_TICKS: AtomicU64 = AtomicU64::new(u64::MAX);

/// Opens the files, reads the node's figures once (so the first sample and S have them), and
/// starts the rank's watcher thread. That thread does the costly reads (`/proc/meminfo`,
/// `/proc/vmstat`, the cgroup's `memory.stat`: 15–35 µs) off the program's path: a sample or a
/// decision then costs one `statm` read and a few atomic loads. Who reads the node: the node's
/// first rank; with `--threshold auto`, one elected rank per node for all ranks of the node
/// (`node_share`), or every rank when the launcher did not say which ranks share a node. The
/// thread also takes the rank's sample when the program made none for [`PERIOD_NS`] (a long
/// phase without MPI calls), in a stream of its own: the program's buffers are its threads'.
pub fn init(place: NodePlace, every_rank_reads_node: bool, ticks_per_sec: f64, after_round: fn()) {
    PERIOD_TICKS.store(
        (PERIOD_NS as f64 * 1e-9 * ticks_per_sec) as u64,
        Ordering::Relaxed,
    );
    let share = (every_rank_reads_node && place.known)
        .then(|| {
            let run = Some(crate::lifecycle::session::run_id())
                .filter(|r| !r.is_empty())
                // SAFETY: getppid cannot fail; the launcher's proxy is every local rank's parent.
                .unwrap_or_else(|| format!("ppid{}", unsafe { libc::getppid() }));
            NodeShare::attach(&run, &offload::config::hostname(), place.local_size)
        })
        .flatten();
    let reads_node = place.reads_node() || every_rank_reads_node;
    let mut watcher = Sampler::open();
    if reads_node {
        publish(&watcher.node(place.reads_node()));
    }
    let period = if every_rank_reads_node {
        WATCH_AUTO
    } else {
        WATCH_PLAIN
    };
    let swap = place.reads_node() || share.is_some();
    let spawned = crate::lifecycle::threads::spawn("evenflush-memory", move || {
        block_signals();
        while crate::lifecycle::session::active() {
            std::thread::sleep(period);
            match &share {
                Some(share) => {
                    let round = share.round(|| {
                        NODE_READS.fetch_add(1, Ordering::Relaxed);
                        watcher.node(swap)
                    });
                    if round.elected {
                        NODE_ELECTED.store(true, Ordering::Relaxed);
                    }
                    publish(&round.node);
                }
                None if reads_node => {
                    NODE_READS.fetch_add(1, Ordering::Relaxed);
                    publish(&watcher.node(swap));
                }
                None => {}
            }
            if crate::lifecycle::session::active() {
                after_round();
            }
        }
        if let Some(share) = &share {
            share.unlink();
        }
    });
    if let Err(e) = spawned {
        say!(
            "evenflush: cannot start the memory watcher thread: {e}; node memory figures stay as read at start-up"
        );
    }
    *OWN.lock().unwrap_or_else(|e| e.into_inner()) = Some(Own {
        sampler: Sampler::open(),
        place,
    });
}

/// Node reads by this process's watcher thread (after the one at init): with `--threshold auto`
/// on a node the launcher described, one rank of the node does them all.
pub static NODE_READS: AtomicU64 = AtomicU64::new(0);
/// Set when this rank's thread became its node's watcher; the program's thread records that as a
/// `NodeWatcher` sample at its next sample point.
pub static NODE_ELECTED: AtomicBool = AtomicBool::new(false);

/// The application's signals must reach its own threads (or the recorder's handler on them),
/// never this helper.
fn block_signals() {
    // SAFETY: sigfillset fills a local set; pthread_sigmask changes only this thread's mask.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
    }
}

/// Where this rank sits on its node (after [`init`]).
pub fn place() -> Option<NodePlace> {
    OWN.lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map(|s| s.place)
}

/// Whether a periodic sample is due at tick `now` (cheap: one atomic load).
#[inline]
pub fn periodic_due(now: u64) -> bool {
    now.wrapping_sub(LAST_SAMPLE.load(Ordering::Relaxed)) >= PERIOD_TICKS.load(Ordering::Relaxed)
}

/// Takes a sample at tick `now`. `recorder_bytes` and `compressed_bytes` are what the recorder
/// holds. Returns `None` before [`init`] or while another thread samples.
pub fn sample(
    now: u64,
    when: MemoryWhen,
    recorder_bytes: u64,
    compressed_bytes: u64,
) -> Option<MemorySample> {
    let mut guard = OWN.try_lock().ok()?;
    let own = guard.as_mut()?;
    LAST_SAMPLE.store(now, Ordering::Relaxed);
    let rss_bytes = own.sampler.rss_bytes();
    let node = node();
    Some(MemorySample {
        time: now,
        rss_bytes,
        recorder_bytes,
        compressed_bytes,
        node_available: node.node_available,
        cgroup_limit: node.cgroup_limit,
        cgroup_usage: node.cgroup_usage,
        swap_out_pages: node.swap_out_pages,
        when,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use format::ThresholdBasis;

    #[test]
    fn name_value_files_parse() {
        let stat = "cache 10\ninactive_file 4096\ntotal_inactive_file 8192\n";
        assert_eq!(field(stat, "inactive_file"), Some(4096));
        assert_eq!(field(stat, "total_inactive_file"), Some(8192));
        assert_eq!(field(stat, "active_file"), None);
        let meminfo = "MemTotal:       24000000 kB\nMemAvailable:   1000 kB\n";
        assert_eq!(field_kib(meminfo, "MemAvailable:"), Some(1_024_000));
    }

    #[test]
    fn this_process_has_a_resident_set_and_the_node_some_memory() {
        let mut s = Sampler::open();
        let rss = s.rss_bytes();
        assert!(rss > 1 << 20 && rss < 64 << 30, "{rss}");
        let node = s.node(true);
        assert!(node.node_available != UNKNOWN_BYTES && node.node_available > 0);
        assert_ne!(node.swap_out_pages, UNKNOWN_BYTES);
        let (available, basis) = node.available();
        assert!(available.is_some());
        assert_ne!(basis, ThresholdBasis::Unknown);
    }

    #[test]
    fn the_tighter_of_cgroup_and_node_is_what_is_available() {
        let n = NodeMemory {
            node_available: 10 << 30,
            cgroup_limit: 512 << 20,
            cgroup_usage: 100 << 20,
            swap_out_pages: 0,
        };
        assert_eq!(n.available(), (Some(412 << 20), ThresholdBasis::Cgroup));
        let no_cgroup = NodeMemory {
            cgroup_limit: UNKNOWN_BYTES,
            cgroup_usage: UNKNOWN_BYTES,
            ..n
        };
        assert_eq!(
            no_cgroup.available(),
            (Some(10 << 30), ThresholdBasis::Node)
        );
        assert_eq!(
            NodeMemory::UNKNOWN.available(),
            (None, ThresholdBasis::Unknown)
        );
    }
}
