//! The machine side: swap file, memory cgroup, signals, and putting everything back.
//!
//! Everything this module changes on the machine is registered in one global [`Cleanup`] record the
//! moment it is changed, so the same undo runs whichever way the experiment ends: normal return
//! (the [`Machine`] guard's `Drop`), an error (also `Drop`), SIGINT/SIGTERM/SIGHUP (the run loop
//! sees the flag, kills the job and returns an error), or a panic (a hook; release builds abort on
//! panic, so `Drop` alone would not run).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

/// Which cgroup interface holds the memory controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CgroupKind {
    /// cgroup v1: `memory.limit_in_bytes`, and `memory.memsw.limit_in_bytes` when swap accounting
    /// is on.
    V1,
    /// cgroup v2: `memory.max` and `memory.swap.max`.
    V2,
}

/// Where job cgroups are created: the memory controller's directory for our own cgroup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupParent {
    pub kind: CgroupKind,
    pub dir: PathBuf,
}

/// One line of `/proc/self/mounts`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    pub fstype: String,
    pub mountpoint: PathBuf,
    pub options: Vec<String>,
}

/// Parses `/proc/self/mounts` (octal escapes such as `\040` in paths are decoded).
pub fn parse_mounts(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let _source = fields.next()?;
            let mountpoint = unescape_mount_path(fields.next()?);
            let fstype = fields.next()?.to_string();
            let options = fields.next()?.split(',').map(str::to_string).collect();
            Some(Mount {
                fstype,
                mountpoint: PathBuf::from(mountpoint),
                options,
            })
        })
        .collect()
}

fn unescape_mount_path(raw: &str) -> String {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let value =
                (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(value);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Finds where a memory cgroup for the job can be created, from the texts of `/proc/self/mounts`
/// and `/proc/self/cgroup`. A v1 memory hierarchy wins over v2 (on hybrid systems the unified
/// hierarchy usually carries no memory controller). `v2_controllers` is the content of the v2
/// group's `cgroup.controllers`, or `None` if unreadable.
pub fn detect_cgroup(
    mounts: &str,
    self_cgroup: &str,
    v2_controllers: impl Fn(&Path) -> Option<String>,
) -> Option<CgroupParent> {
    let mounts = parse_mounts(mounts);
    let mut v1_path = None;
    let mut v2_path = None;
    for line in self_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            v2_path = Some(path.to_string());
        } else if controllers.split(',').any(|c| c == "memory") {
            v1_path = Some(path.to_string());
        }
    }
    if let Some(path) = v1_path
        && let Some(mount) = mounts
            .iter()
            .find(|m| m.fstype == "cgroup" && m.options.iter().any(|o| o == "memory"))
    {
        return Some(CgroupParent {
            kind: CgroupKind::V1,
            dir: join_cgroup_path(&mount.mountpoint, &path),
        });
    }
    let path = v2_path?;
    let mount = mounts.iter().find(|m| m.fstype == "cgroup2")?;
    let dir = join_cgroup_path(&mount.mountpoint, &path);
    let controllers = v2_controllers(&dir)?;
    controllers
        .split_whitespace()
        .any(|c| c == "memory")
        .then_some(CgroupParent {
            kind: CgroupKind::V2,
            dir,
        })
}

fn join_cgroup_path(mountpoint: &Path, path: &str) -> PathBuf {
    let relative = path.trim_start_matches('/');
    if relative.is_empty() {
        mountpoint.to_path_buf()
    } else {
        mountpoint.join(relative)
    }
}

/// Active swap areas (file or partition names) from `/proc/swaps`, with their sizes in bytes.
pub fn parse_proc_swaps(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let name = fields.next()?.to_string();
            let _kind = fields.next()?;
            let kib: u64 = fields.next()?.parse().ok()?;
            Some((name, kib * 1024))
        })
        .collect()
}

/// `key value` lines (`/proc/vmstat`, `memory.stat`) into a lookup.
pub fn parse_key_values(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let key = fields.next()?.to_string();
            let value = fields.next()?.parse().ok()?;
            Some((key, value))
        })
        .collect()
}

pub fn lookup(pairs: &[(String, u64)], key: &str) -> Option<u64> {
    pairs.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
}

/// What the checks found; `problems` empty means the experiment can run.
#[derive(Debug)]
pub struct Readiness {
    pub cgroup: Option<CgroupParent>,
    pub active_swap: Vec<(String, u64)>,
    pub problems: Vec<String>,
}

fn tool_exists(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(name).is_file()))
}

/// Checks root, cgroup memory controller and swap support without changing anything.
pub fn check_readiness() -> Readiness {
    let mut problems = Vec::new();
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        problems.push(format!(
            "not root (euid {euid}): enabling swap and creating a memory cgroup need root"
        ));
    }
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let self_cgroup = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let cgroup = detect_cgroup(&mounts, &self_cgroup, |dir| {
        fs::read_to_string(dir.join("cgroup.controllers")).ok()
    });
    match &cgroup {
        None => problems.push(
            "no cgroup memory controller found (neither a v1 `memory` hierarchy nor a v2 group \
             listing `memory` in cgroup.controllers): the job's memory cannot be limited"
                .into(),
        ),
        Some(parent) if !parent.dir.is_dir() => problems.push(format!(
            "the memory cgroup of this process, {}, is not a directory",
            parent.dir.display()
        )),
        Some(_) => {}
    }
    let swaps_text = fs::read_to_string("/proc/swaps");
    let active_swap = swaps_text
        .as_deref()
        .map(parse_proc_swaps)
        .unwrap_or_default();
    if swaps_text.is_err() {
        problems.push("/proc/swaps is not readable: this kernel may lack swap support".into());
    } else if active_swap.is_empty() {
        for tool in ["mkswap", "swapon", "swapoff"] {
            if !tool_exists(tool) {
                problems.push(format!(
                    "no swap is active and `{tool}` is not on PATH to create a swap file"
                ));
            }
        }
    }
    Readiness {
        cgroup,
        active_swap,
        problems,
    }
}

/// What has been changed and must be undone.
#[derive(Default)]
struct Cleanup {
    swap_file: Option<PathBuf>,
    cgroups: Vec<(CgroupKind, PathBuf)>,
    /// Process group of the running job, killed first.
    job_pgid: Option<i32>,
}

static CLEANUP: Mutex<Option<Cleanup>> = Mutex::new(None);
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(signal: libc::c_int) {
    // Only async-signal-safe work here: the run loop polls the flag.
    SIGNAL.store(signal, Ordering::SeqCst);
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Whether SIGINT, SIGTERM or SIGHUP arrived since the handlers were installed.
pub fn interrupted() -> Option<i32> {
    INTERRUPTED
        .load(Ordering::SeqCst)
        .then(|| SIGNAL.load(Ordering::SeqCst))
}

fn install_handlers() {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to atomics, which is async-signal-safe; the sigaction
        // struct is fully initialised (zeroed, then the fields we use).
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        previous(info);
        restore_all();
    }));
}

/// The guard for everything the experiment changes on the machine.
pub struct Machine {
    pub cgroup_parent: CgroupParent,
    /// Whether the swap in use was created by us.
    pub created_swap: Option<PathBuf>,
    pub swap_bytes: u64,
}

impl Machine {
    /// Installs signal handlers and, when no swap is active, creates and enables `swap_file` of
    /// `swap_bytes`.
    pub fn prepare(ready: &Readiness, swap_file: &Path, swap_bytes: u64) -> Result<Machine> {
        let cgroup_parent = ready
            .cgroup
            .clone()
            .ok_or_else(|| anyhow!("no memory cgroup"))?;
        *CLEANUP.lock().unwrap_or_else(|e| e.into_inner()) = Some(Cleanup::default());
        install_handlers();
        let mut machine = Machine {
            cgroup_parent,
            created_swap: None,
            swap_bytes: ready.active_swap.iter().map(|(_, b)| b).sum(),
        };
        if ready.active_swap.is_empty() {
            create_swap(swap_file, swap_bytes)?;
            machine.created_swap = Some(swap_file.to_path_buf());
            machine.swap_bytes = swap_bytes;
        }
        if machine.cgroup_parent.kind == CgroupKind::V2 {
            // Children only get the memory files when the parent delegates the controller.
            let control = machine.cgroup_parent.dir.join("cgroup.subtree_control");
            let _ = fs::write(&control, "+memory");
        }
        Ok(machine)
    }

    /// Creates a job cgroup limited to `limit` bytes of memory and `swap` bytes of swap.
    pub fn create_cgroup(&self, name: &str, limit: u64, swap: u64) -> Result<JobCgroup> {
        let dir = self.cgroup_parent.dir.join(name);
        fs::create_dir(&dir).with_context(|| format!("creating cgroup {}", dir.display()))?;
        with_cleanup(|c| {
            c.cgroups
                .push((self.cgroup_parent.kind.clone(), dir.clone()))
        });
        let cgroup = JobCgroup {
            kind: self.cgroup_parent.kind.clone(),
            dir,
        };
        match cgroup.kind {
            CgroupKind::V1 => {
                cgroup.write("memory.limit_in_bytes", &limit.to_string())?;
                // memsw counts memory + swap; without it (swap accounting off) swap is unlimited.
                if cgroup.dir.join("memory.memsw.limit_in_bytes").exists() {
                    cgroup.write("memory.memsw.limit_in_bytes", &(limit + swap).to_string())?;
                }
            }
            CgroupKind::V2 => {
                cgroup.write("memory.max", &limit.to_string())?;
                if cgroup.dir.join("memory.swap.max").exists() {
                    cgroup.write("memory.swap.max", &swap.to_string())?;
                }
            }
        }
        Ok(cgroup)
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        restore_all();
    }
}

fn with_cleanup(f: impl FnOnce(&mut Cleanup)) {
    let mut guard = CLEANUP.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = guard.as_mut() {
        f(c);
    }
}

/// Records the process group of the job now running (`None` when it ended).
pub fn set_job_pgid(pgid: Option<i32>) {
    with_cleanup(|c| c.job_pgid = pgid);
}

fn run_tool(program: &str, args: &[&str]) -> Result<()> {
    let output = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("starting {program}"))?;
    if !output.status.success() {
        bail!(
            "{program} {} failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

fn create_swap(path: &Path, bytes: u64) -> Result<()> {
    if path.exists() {
        bail!(
            "{} already exists; remove it or name another --swap-file",
            path.display()
        );
    }
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    let p = path
        .to_str()
        .ok_or_else(|| anyhow!("swap file path is not UTF-8"))?;
    // Preallocating is instant; swapon refuses preallocated files on some filesystems, and then
    // the file is written out for real.
    let enable = || -> Result<()> {
        run_tool("chmod", &["600", p])?;
        run_tool("mkswap", &[p])?;
        run_tool("swapon", &[p])
    };
    if let Err(first) = fill_swap_file(path, bytes, true).and_then(|()| enable()) {
        let _ = fs::remove_file(path);
        fill_swap_file(path, bytes, false)?;
        enable().map_err(|e| e.context(format!("after preallocation failed with: {first:#}")))?;
    }
    Ok(())
}

fn fill_swap_file(path: &Path, bytes: u64, preallocate: bool) -> Result<()> {
    use std::os::fd::AsRawFd;
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(|| format!("creating swap file {}", path.display()))?;
    with_cleanup(|c| c.swap_file = Some(path.to_path_buf()));
    if preallocate {
        let len = libc::off_t::try_from(bytes).context("swap size too large")?;
        // SAFETY: fallocate on a file descriptor we own; no memory is passed.
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("preallocating {}", path.display()));
        }
    } else {
        let block = vec![0u8; 1 << 20];
        let mut left = bytes;
        while left > 0 {
            let n = left.min(block.len() as u64) as usize;
            file.write_all(&block[..n])?;
            left -= n as u64;
        }
    }
    file.sync_all()?;
    Ok(())
}

/// A memory cgroup holding one job.
pub struct JobCgroup {
    pub kind: CgroupKind,
    pub dir: PathBuf,
}

/// What a job cgroup says about memory and swap after the job.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CgroupStats {
    pub pgmajfault: Option<u64>,
    pub peak_bytes: Option<u64>,
    pub peak_with_swap_bytes: Option<u64>,
    pub oom_kills: Option<u64>,
}

impl JobCgroup {
    fn write(&self, file: &str, value: &str) -> Result<()> {
        fs::write(self.dir.join(file), value)
            .with_context(|| format!("writing {value} to {}", self.dir.join(file).display()))
    }

    fn read_u64(&self, file: &str) -> Option<u64> {
        fs::read_to_string(self.dir.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// The file a process writes its pid into to join.
    pub fn procs_file(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    pub fn pids(&self) -> Vec<i32> {
        fs::read_to_string(self.procs_file())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    pub fn stats(&self) -> CgroupStats {
        let stat =
            parse_key_values(&fs::read_to_string(self.dir.join("memory.stat")).unwrap_or_default());
        match self.kind {
            CgroupKind::V1 => {
                let oom = parse_key_values(
                    &fs::read_to_string(self.dir.join("memory.oom_control")).unwrap_or_default(),
                );
                CgroupStats {
                    pgmajfault: lookup(&stat, "total_pgmajfault").or(lookup(&stat, "pgmajfault")),
                    peak_bytes: self.read_u64("memory.max_usage_in_bytes"),
                    peak_with_swap_bytes: self.read_u64("memory.memsw.max_usage_in_bytes"),
                    oom_kills: lookup(&oom, "oom_kill"),
                }
            }
            CgroupKind::V2 => {
                let events = parse_key_values(
                    &fs::read_to_string(self.dir.join("memory.events")).unwrap_or_default(),
                );
                CgroupStats {
                    pgmajfault: lookup(&stat, "pgmajfault"),
                    peak_bytes: self.read_u64("memory.peak"),
                    peak_with_swap_bytes: self.read_u64("memory.swap.peak"),
                    oom_kills: lookup(&events, "oom_kill"),
                }
            }
        }
    }

    /// Kills what is left in the group, then removes it.
    pub fn remove(self) -> Result<()> {
        let result = remove_cgroup(&self.kind, &self.dir);
        with_cleanup(|c| c.cgroups.retain(|(_, d)| d != &self.dir));
        result
    }
}

fn kill_pids_in(dir: &Path) {
    for pid in fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse::<i32>().ok())
    {
        // SAFETY: kill has no memory effects; a stale pid only yields ESRCH.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

fn remove_cgroup(_kind: &CgroupKind, dir: &Path) -> Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        kill_pids_in(dir);
        match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() >= deadline => {
                // Last resort: move what still lives there to the parent so the directory can go.
                if let Some(parent) = dir.parent() {
                    for pid in fs::read_to_string(dir.join("cgroup.procs"))
                        .unwrap_or_default()
                        .lines()
                    {
                        let _ = fs::write(parent.join("cgroup.procs"), pid.trim());
                    }
                }
                return fs::remove_dir(dir).with_context(|| {
                    format!("removing cgroup {} (first error: {e})", dir.display())
                });
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Kills the job's process group: SIGTERM, a moment's grace, then SIGKILL.
pub fn kill_group(pgid: i32) {
    // SAFETY: signals to a process group id we created; no memory is touched.
    unsafe { libc::kill(-pgid, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        // SAFETY: signal 0 only checks whether the group still exists.
        if unsafe { libc::kill(-pgid, 0) } != 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: as above.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
}

/// Undoes everything recorded so far; safe to call more than once.
pub fn restore_all() {
    let taken = CLEANUP.lock().unwrap_or_else(|e| e.into_inner()).take();
    let Some(cleanup) = taken else {
        return;
    };
    if let Some(pgid) = cleanup.job_pgid {
        kill_group(pgid);
    }
    for (kind, dir) in cleanup.cgroups.iter().rev() {
        if let Err(e) = remove_cgroup(kind, dir) {
            eprintln!("evenflush experiment: could not remove cgroup: {e:#}");
        }
    }
    if let Some(file) = cleanup.swap_file {
        if let Some(p) = file.to_str()
            && fs::read_to_string("/proc/swaps")
                .map(|t| parse_proc_swaps(&t).iter().any(|(name, _)| name == p))
                .unwrap_or(false)
            && let Err(e) = run_tool("swapoff", &[p])
        {
            eprintln!("evenflush experiment: {e:#}; the swap file is kept, remove it by hand");
            return;
        }
        if let Err(e) = fs::remove_file(&file) {
            eprintln!(
                "evenflush experiment: could not remove swap file {}: {e}",
                file.display()
            );
        }
    }
}

/// Global swap counters from `/proc/vmstat` (pages).
pub fn swap_counters() -> (u64, u64) {
    let pairs = parse_key_values(&fs::read_to_string("/proc/vmstat").unwrap_or_default());
    (
        lookup(&pairs, "pswpin").unwrap_or(0),
        lookup(&pairs, "pswpout").unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID_MOUNTS: &str = "\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
";
    const HYBRID_SELF: &str = "\
8:pids:/
4:memory:/process_api/abc
1:cpu:/
0::/
";

    #[test]
    fn v1_memory_hierarchy_is_found_under_our_own_group() {
        let found = detect_cgroup(HYBRID_MOUNTS, HYBRID_SELF, |_| Some(String::new())).unwrap();
        assert_eq!(found.kind, CgroupKind::V1);
        assert_eq!(
            found.dir,
            PathBuf::from("/sys/fs/cgroup/memory/process_api/abc")
        );
    }

    #[test]
    fn pure_v2_needs_memory_in_controllers() {
        let mounts = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\n";
        let own = "0::/user.slice/job 1\n";
        let with = detect_cgroup(mounts, own, |dir| {
            assert_eq!(dir, Path::new("/sys/fs/cgroup/user.slice/job 1"));
            Some("cpu io memory pids".into())
        })
        .unwrap();
        assert_eq!(with.kind, CgroupKind::V2);
        assert!(detect_cgroup(mounts, own, |_| Some("cpu io".into())).is_none());
        assert!(detect_cgroup(mounts, own, |_| None).is_none());
        // Only a v1 mount without the memory controller: nothing usable.
        assert!(
            detect_cgroup("cgroup /c/cpu cgroup rw,cpu 0 0\n", "3:cpu:/\n", |_| None).is_none()
        );
    }

    #[test]
    fn mount_paths_are_unescaped() {
        let mounts = parse_mounts("cgroup2 /sys/fs/my\\040cg cgroup2 rw 0 0\n");
        assert_eq!(mounts[0].mountpoint, PathBuf::from("/sys/fs/my cg"));
    }

    #[test]
    fn swaps_and_counters_parse() {
        let swaps = "Filename\tType\tSize\tUsed\tPriority\n/work/swapfile file 262140 0 -2\n";
        assert_eq!(
            parse_proc_swaps(swaps),
            vec![("/work/swapfile".to_string(), 262140 * 1024)]
        );
        assert!(parse_proc_swaps("Filename\tType\tSize\tUsed\tPriority\n").is_empty());
        let vmstat = parse_key_values("pswpin 12\npswpout 345\npgmajfault 9\n");
        assert_eq!(lookup(&vmstat, "pswpout"), Some(345));
        assert_eq!(lookup(&vmstat, "nothing"), None);
    }
}
