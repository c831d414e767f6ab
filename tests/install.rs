//! A site's installation: `scripts/install.sh --prefix`, its module files, man pages and
//! completions, and `scripts/deb.sh`'s Debian package. Every job here runs from the installed files
//! only: a clean environment (PATH without the build tree, no LD_LIBRARY_PATH, no EVENFLUSH_*), so
//! the installed binary must find its libraries relative to itself. The release build is reused
//! (`--no-build`): nothing is compiled here but one small MPI program per MPI.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};

use common::{JOB_TIMEOUT, Mpi, check, mpi_lock, output_with_timeout, repo_root, scratch};

const RING_ITERATIONS: u64 = 20;

/// The installed prefix every test but the package's shares: installed once per test binary.
fn prefix() -> PathBuf {
    static PREFIX: OnceLock<PathBuf> = OnceLock::new();
    PREFIX
        .get_or_init(|| {
            let prefix = scratch("install-prefix");
            install_into(&prefix);
            prefix
        })
        .clone()
}

fn install_into(prefix: &Path) {
    check(
        Command::new("bash")
            .arg(repo_root().join("scripts/install.sh"))
            .args(["--no-build", "--prefix"])
            .arg(prefix)
            .env("CARGO_TARGET_DIR", target_dir())
            .output()
            .expect("run scripts/install.sh"),
        "scripts/install.sh",
    );
}

/// The target directory this test binary was built into (the release build install.sh copies).
fn target_dir() -> PathBuf {
    common::evenflush_bin()
        .parent()
        .and_then(Path::parent)
        .expect("target/release/evenflush")
        .to_path_buf()
}

/// A command with only what a login shell on a machine without the build tree would have.
fn clean(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env(
            "HOME",
            std::env::var_os("HOME").unwrap_or_else(|| "/root".into()),
        )
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    cmd
}

/// tests/programs/ring.c built for `mpi` (once per test binary).
fn ring(mpi: Mpi) -> PathBuf {
    static BUILT: Mutex<Vec<(Mpi, PathBuf)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, p)) = built.iter().find(|(m, _)| *m == mpi) {
        return p.clone();
    }
    let dir = scratch(&format!("install-ring-{}", mpi.name()));
    let exe = dir.join("ring");
    let cc = match mpi {
        Mpi::OpenMpi => "mpicc.openmpi",
        Mpi::Mpich => "mpicc.mpich",
    };
    check(
        Command::new(cc)
            .args(["-O2", "-std=c11", "-I"])
            .arg(repo_root().join("workloads"))
            .arg("-o")
            .arg(&exe)
            .arg(repo_root().join("tests/programs/ring.c"))
            .output()
            .unwrap_or_else(|e| panic!("run {cc}: {e}")),
        &format!("{cc} ring.c"),
    );
    built.push((mpi, exe.clone()));
    exe
}

/// The launch line of a 2-rank ring job.
fn launch(mpi: Mpi) -> Vec<String> {
    let mut argv = mpi.launch(2);
    argv.push(ring(mpi).display().to_string());
    argv.extend(["--iterations".into(), RING_ITERATIONS.to_string()]);
    argv
}

/// What a traced 2-rank ring job must have left: the installed library preloaded, and a trace
/// `evenflush info` (the installed one) reads with every rank and every message.
fn check_trace(evenflush: &Path, trace: &Path, lib_dir: &Path, mpi: Mpi) {
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(trace.join("meta.json")).expect("meta.json of the run"),
    )
    .expect("meta.json is JSON");
    let library = PathBuf::from(
        meta["library"]
            .as_str()
            .expect("meta.json names the library"),
    );
    assert_eq!(
        library,
        lib_dir.join(format!("libevenflush_{}.so", mpi.name())),
        "the installed binary preloaded another library than the installed one"
    );
    let info = check(
        clean(evenflush)
            .args(["info", "--json"])
            .arg(trace)
            .output()
            .expect("run evenflush info"),
        "installed evenflush info",
    );
    let info: serde_json::Value = serde_json::from_slice(&info.stdout).expect("info --json");
    assert_eq!(info["ranks"], 2, "ranks in the trace: {info}");
    for f in ["MPI_Send", "MPI_Recv"] {
        assert_eq!(
            info["functions"][f].as_u64(),
            Some(2 * RING_ITERATIONS),
            "{f} calls over both ranks"
        );
    }
}

/// A traced 2-rank job under `mpi`, run by the evenflush of `prefix` in a clean environment.
fn traced_job(prefix: &Path, mpi: Mpi, name: &str) {
    let evenflush = prefix.join("bin/evenflush");
    let trace = scratch(name).join("trace");
    let mut cmd = clean(&evenflush);
    cmd.args(["run", "--out"])
        .arg(&trace)
        .arg("--")
        .args(launch(mpi));
    let out = {
        let _lock = mpi_lock();
        output_with_timeout(&mut cmd, JOB_TIMEOUT, "installed evenflush run")
    };
    check(out, &format!("installed evenflush run ({})", mpi.name()));
    check_trace(&evenflush, &trace, &prefix.join("lib/evenflush"), mpi);
}

/// Every file a site expects under `prefix` (`man_suffix` ".gz" for the Debian package).
fn check_layout(prefix: &Path, man_suffix: &str) {
    let mut expected = vec![
        "bin/evenflush".to_string(),
        "lib/evenflush/libevenflush_openmpi.so".into(),
        "lib/evenflush/libevenflush_mpich.so".into(),
        format!("share/man/man1/evenflush.1{man_suffix}"),
        format!("share/man/man1/evenflush-run.1{man_suffix}"),
        "share/bash-completion/completions/evenflush".into(),
        "share/zsh/site-functions/_evenflush".into(),
        "share/fish/vendor_completions.d/evenflush.fish".into(),
    ];
    let version = env!("CARGO_PKG_VERSION");
    expected.push(format!("share/modulefiles/evenflush/{version}.lua"));
    expected.push(format!("share/modulefiles-tcl/evenflush/{version}"));
    let missing: Vec<&String> = expected
        .iter()
        .filter(|f| !prefix.join(f).is_file())
        .collect();
    assert!(
        missing.is_empty(),
        "missing under {}: {missing:?}",
        prefix.display()
    );
}

#[test]
fn installed_prefix_runs_jobs_of_both_mpis() {
    let prefix = prefix();
    check_layout(&prefix, "");
    traced_job(&prefix, Mpi::OpenMpi, "install-openmpi");
    traced_job(&prefix, Mpi::Mpich, "install-mpich");
}

#[test]
fn missing_library_error_names_the_places_looked_in() {
    // A copy of the binary alone: no library next to it nor in ../lib/evenflush.
    let lone = scratch("install-lone").join("bin");
    std::fs::create_dir_all(&lone).unwrap();
    std::fs::copy(prefix().join("bin/evenflush"), lone.join("evenflush")).unwrap();
    let out = clean(lone.join("evenflush"))
        .args(["run", "--mpi", "openmpi", "--out"])
        .arg(lone.join("trace"))
        .args(["--", "true"])
        .output()
        .expect("run the lone evenflush");
    assert!(!out.status.success(), "ran without any preload library");
    let err = String::from_utf8_lossy(&out.stderr);
    for place in [lone.clone(), lone.parent().unwrap().join("lib/evenflush")] {
        assert!(
            err.contains(&place.display().to_string()),
            "the error does not name {}:\n{err}",
            place.display()
        );
    }
}

/// Lmod's shell setup, from Debian's `lmod`.
const LMOD_INIT: &str = "/usr/share/lmod/lmod/init/bash";

#[test]
fn module_files_load_with_lmod() {
    if !Path::new(LMOD_INIT).is_file() {
        common::skip_or_fail(
            "lmod",
            &format!("Debian's lmod is not installed (no {LMOD_INIT})"),
        );
        return;
    }
    let prefix = prefix();
    for (dir, flavour) in [("modulefiles", "lua"), ("modulefiles-tcl", "tcl")] {
        let trace = scratch(&format!("install-module-{flavour}")).join("trace");
        let script = format!(
            "source {LMOD_INIT}\n\
             module use '{modules}'\n\
             module load evenflush\n\
             command -v evenflush\n\
             printf '%s\\n' \"$MANPATH\"\n\
             exec evenflush run --out '{trace}' -- {launch}\n",
            modules = prefix.join("share").join(dir).display(),
            trace = trace.display(),
            launch = launch(Mpi::OpenMpi).join(" "),
        );
        let mut cmd = clean("bash");
        cmd.args(["--noprofile", "--norc", "-c", &script]);
        let out = {
            let _lock = mpi_lock();
            output_with_timeout(
                &mut cmd,
                JOB_TIMEOUT,
                "module load evenflush; evenflush run",
            )
        };
        let out = check(out, &format!("the {flavour} module file under Lmod"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let mut lines = stdout.lines();
        assert_eq!(
            lines.next().map(PathBuf::from),
            Some(prefix.join("bin/evenflush")),
            "evenflush on PATH after module load ({flavour}):\n{stdout}"
        );
        let manpath = lines.next().unwrap_or_default();
        assert!(
            manpath.starts_with(&format!("{}:", prefix.join("share/man").display())),
            "MANPATH after module load ({flavour}) does not lead with the installed pages: \
             {manpath:?}"
        );
        // man-db reads an empty entry as its own defaults: the system's pages stay reachable.
        assert!(
            manpath.ends_with(':'),
            "MANPATH hides the system's man pages: {manpath:?}"
        );
        check_trace(
            &prefix.join("bin/evenflush"),
            &trace,
            &prefix.join("lib/evenflush"),
            Mpi::OpenMpi,
        );
    }
}

/// Subcommand names listed under `Commands:` of a `--help`, without `help`.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

/// Long flags a `--help` lists as options (lines starting with `-x, --flag` or `--flag`).
fn long_flags(help: &str) -> BTreeSet<String> {
    help.lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with('-'))
        .flat_map(|l| {
            l.split(|c: char| c.is_whitespace() || c == ',' || c == '=' || c == '[')
                .filter(|w| w.starts_with("--") && w.len() > 2)
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

fn help_of(evenflush: &Path, words: &[String]) -> String {
    let out = check(
        clean(evenflush)
            .args(words)
            .arg("--help")
            .output()
            .expect("run evenflush --help"),
        &format!("evenflush {} --help", words.join(" ")),
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn man_pages_cover_every_subcommand_and_flag() {
    let prefix = prefix();
    let evenflush = prefix.join("bin/evenflush");
    let man1 = prefix.join("share/man/man1");
    // Every command, subcommands of subcommands too (experiment swap-vs-offload).
    let mut pending: Vec<Vec<String>> = vec![vec![]];
    let mut checked = 0;
    while let Some(words) = pending.pop() {
        let help = help_of(&evenflush, &words);
        for sub in subcommands(&help) {
            let mut deeper = words.clone();
            deeper.push(sub);
            pending.push(deeper);
        }
        let page_name = std::iter::once("evenflush".to_string())
            .chain(words.iter().cloned())
            .collect::<Vec<_>>()
            .join("-");
        let page_path = man1.join(format!("{page_name}.1"));
        let page = std::fs::read_to_string(&page_path)
            .unwrap_or_else(|e| panic!("no man page {}: {e}", page_path.display()));
        // roff writes a hyphen as \-.
        let page = page.replace("\\-", "-");
        let flags = long_flags(&help);
        let missing: Vec<&String> = flags
            .iter()
            .filter(|f| !page.contains(f.as_str()))
            .collect();
        assert!(
            missing.is_empty(),
            "{page_name}.1 lacks flags of its --help: {missing:?}"
        );
        checked += flags.len();
    }
    assert!(checked > 20, "only {checked} flags found in all --help");
}

#[test]
fn bash_completion_offers_every_subcommand() {
    let prefix = prefix();
    let evenflush = prefix.join("bin/evenflush");
    let expected = subcommands(&help_of(&evenflush, &[]));
    assert!(expected.len() > 5, "subcommands in --help: {expected:?}");
    // What bash itself offers after `evenflush <TAB>`, from the installed script.
    let script = format!(
        "source '{}'\n\
         COMP_WORDS=(evenflush ''); COMP_CWORD=1; COMP_LINE='evenflush '; COMP_POINT=10\n\
         _evenflush evenflush '' evenflush\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        prefix
            .join("share/bash-completion/completions/evenflush")
            .display()
    );
    let out = check(
        clean("bash")
            .args(["--noprofile", "--norc", "-c", &script])
            .output()
            .expect("run bash"),
        "the bash completion",
    );
    let offered: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    let missing: Vec<&String> = expected.iter().filter(|s| !offered.contains(*s)).collect();
    assert!(
        missing.is_empty(),
        "bash does not complete {missing:?}; offered {offered:?}"
    );
    assert!(
        !offered.contains("generate"),
        "bash offers the hidden subcommand: {offered:?}"
    );
}

/// A dpkg database root of its own: the package is installed and removed there, never into the
/// system, while its Depends are still checked against the system's installed packages.
struct DpkgRoot(PathBuf);

impl DpkgRoot {
    fn new(dir: PathBuf) -> Self {
        let db = dir.join("var/lib/dpkg");
        for sub in ["info", "updates"] {
            std::fs::create_dir_all(db.join(sub)).unwrap();
        }
        std::fs::copy("/var/lib/dpkg/status", db.join("status")).expect("copy dpkg's status");
        DpkgRoot(dir)
    }

    fn dpkg(&self, args: &[&std::ffi::OsStr]) -> Output {
        Command::new("dpkg")
            .arg(format!("--root={}", self.0.display()))
            .args(["--log=/dev/null", "--force-script-chrootless"])
            .args(args)
            .output()
            .expect("run dpkg")
    }
}

impl Drop for DpkgRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn debian_package_installs_and_runs() {
    for tool in ["dpkg-deb", "dpkg-shlibdeps"] {
        if Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .map(|o| !o.status.success())
            .unwrap_or(true)
        {
            common::skip_or_fail("deb", &format!("{tool} is missing (Debian's dpkg-dev)"));
            return;
        }
    }
    let work = scratch("install-deb");
    let out = check(
        Command::new("bash")
            .arg(repo_root().join("scripts/deb.sh"))
            .args(["--no-build", "--out"])
            .arg(&work)
            .env("CARGO_TARGET_DIR", target_dir())
            .output()
            .expect("run scripts/deb.sh"),
        "scripts/deb.sh",
    );
    let deb = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(deb.is_file(), "deb.sh printed {deb:?}, not a file");

    let root = DpkgRoot::new(work.join("root"));
    check(
        root.dpkg(&["-i".as_ref(), deb.as_os_str()]),
        "dpkg -i (its Depends checked against this system)",
    );
    let usr = root.0.join("usr");
    check_layout(&usr, ".gz");
    traced_job(&usr, Mpi::OpenMpi, "install-deb-openmpi");
    traced_job(&usr, Mpi::Mpich, "install-deb-mpich");
    check(root.dpkg(&["-r".as_ref(), "evenflush".as_ref()]), "dpkg -r");
    assert!(
        !usr.join("bin/evenflush").exists() && !usr.join("lib/evenflush").exists(),
        "dpkg -r left the package's files"
    );
}
