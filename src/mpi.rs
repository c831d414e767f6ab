//! Which MPI a job uses, so the launcher can preload the matching library build. Open MPI and MPICH
//! have different ABIs: a library built for one crashes in a program of the other.

use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mpi {
    OpenMpi,
    Mpich,
}

impl Mpi {
    pub fn name(self) -> &'static str {
        match self {
            Mpi::OpenMpi => "openmpi",
            Mpi::Mpich => "mpich",
        }
    }

    /// File name of the preload library built for this MPI.
    pub fn library_file(self) -> &'static str {
        match self {
            Mpi::OpenMpi => "libevenflush_openmpi.so",
            Mpi::Mpich => "libevenflush_mpich.so",
        }
    }

    /// How this MPI's launcher is told to set an environment variable in the ranks only (so the
    /// launcher process itself does not load the library).
    pub fn env_args(self, name: &str, value: &str) -> Vec<String> {
        match self {
            Mpi::OpenMpi => vec!["-x".into(), format!("{name}={value}")],
            Mpi::Mpich => vec!["-genv".into(), name.into(), value.into()],
        }
    }
}

/// Finds an executable the way a shell would: a path with a slash is taken as is, a bare name is
/// looked up on PATH.
pub fn resolve_executable(name: &str) -> Option<PathBuf> {
    let is_exec = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        p.metadata()
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if name.contains('/') {
        let p = PathBuf::from(name);
        return is_exec(&p).then_some(p);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| is_exec(p))
    })
}

/// The MPI a dynamically linked program links, from `ldd`.
pub fn linked_mpi(program: &Path) -> Option<Mpi> {
    let out = Command::new("ldd").arg(program).output().ok()?;
    classify_ldd(&String::from_utf8_lossy(&out.stdout))
}

fn classify_ldd(ldd: &str) -> Option<Mpi> {
    // libmpi.so.40 is Open MPI's C library; MPICH ships libmpich.so.12 (libmpi.so.12 is its alias).
    if ldd.contains("libmpich") || ldd.contains("libmpi.so.12") {
        Some(Mpi::Mpich)
    } else if ldd.contains("libmpi.so.4")
        || ldd.contains("libopen-rte")
        || ldd.contains("libopen-pal")
    {
        Some(Mpi::OpenMpi)
    } else {
        None
    }
}

/// The MPI a launcher (mpirun, mpiexec, ...) belongs to: for programs that load MPI at run time,
/// such as Python with mpi4py, the launcher is the only witness.
pub fn launcher_mpi(launcher: &Path) -> Option<Mpi> {
    let real = std::fs::canonicalize(launcher).unwrap_or_else(|_| launcher.to_path_buf());
    let file = real.file_name()?.to_string_lossy().to_lowercase();
    if file.contains("mpich") || file.contains("hydra") {
        return Some(Mpi::Mpich);
    }
    if file.contains("openmpi") || file == "orterun" || file == "prterun" {
        return Some(Mpi::OpenMpi);
    }
    let out = Command::new(&real).arg("--version").output().ok()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if text.contains("Open MPI") || text.contains("OpenRTE") {
        Some(Mpi::OpenMpi)
    } else if text.contains("HYDRA") || text.contains("MPICH") {
        Some(Mpi::Mpich)
    } else {
        None
    }
}

/// Launcher options that take a value, so the value is not mistaken for the program.
const OPTIONS_WITH_VALUE: &[&str] = &[
    "-n",
    "-np",
    "-c",
    "--np",
    "-N",
    "-npernode",
    "--npernode",
    "-ppn",
    "-H",
    "-host",
    "--host",
    "-hosts",
    "-hostfile",
    "--hostfile",
    "-f",
    "-machinefile",
    "--machinefile",
    "-x",
    "-mca",
    "--mca",
    "-gmca",
    "--gmca",
    "-genv",
    "-env",
    "-wdir",
    "--wdir",
    "-map-by",
    "--map-by",
    "-bind-to",
    "--bind-to",
    "-rank-by",
    "--rank-by",
    "-launcher",
    "-iface",
    "-genvlist",
    "-envlist",
    "-prefix",
    "--prefix",
    "-output-filename",
    "--output-filename",
];

/// Options whose value is two words (`-genv NAME VALUE`, `--mca KEY VALUE`).
const OPTIONS_WITH_TWO_VALUES: &[&str] = &["-genv", "-env", "-mca", "--mca", "-gmca", "--gmca"];

/// Slurm's `srun` options that take a value (its optional-value options take it only as
/// `--opt=value`, so they are not listed). `-c` is `--cpus-per-task` there, not a rank count.
const SRUN_OPTIONS_WITH_VALUE: &[&str] = &[
    "-A",
    "--account",
    "-b",
    "--begin",
    "-B",
    "--extra-node-info",
    "-c",
    "--cpus-per-task",
    "-C",
    "--constraint",
    "-d",
    "--dependency",
    "-D",
    "--chdir",
    "-e",
    "--error",
    "-G",
    "--gpus",
    "-i",
    "--input",
    "-J",
    "--job-name",
    "-L",
    "--licenses",
    "-m",
    "--distribution",
    "-M",
    "--clusters",
    "-n",
    "--ntasks",
    "-N",
    "--nodes",
    "-o",
    "--output",
    "-p",
    "--partition",
    "-q",
    "--qos",
    "-r",
    "--relative",
    "-S",
    "--core-spec",
    "-t",
    "--time",
    "-T",
    "--threads",
    "-w",
    "--nodelist",
    "-W",
    "--wait",
    "-x",
    "--exclude",
    "--mpi",
    "--export",
    "--mem",
    "--mem-per-cpu",
    "--mem-per-gpu",
    "--ntasks-per-node",
    "--ntasks-per-core",
    "--ntasks-per-socket",
    "--cpu-bind",
    "--gres",
    "--gpus-per-task",
    "--cpus-per-gpu",
    "--reservation",
    "--comment",
    "--jobid",
    "--het-group",
    "--signal",
    "--tmp",
    "--mincpus",
    "--network",
    "--hint",
    "--sockets-per-node",
    "--cores-per-socket",
    "--threads-per-core",
    "--task-prolog",
    "--task-epilog",
    "--prolog",
    "--epilog",
    "--open-mode",
    "--deadline",
    "--profile",
    "--uid",
    "--gid",
    "--slurmd-debug",
    "--time-min",
    "--wckey",
    "--mcs-label",
];

/// Whether `launcher` is Slurm's `srun`, which starts the ranks itself (no mpirun), hands them
/// its own environment and takes options of its own.
pub fn is_srun(launcher: &str) -> bool {
    Path::new(launcher).file_name().is_some_and(|f| f == "srun")
}

/// The parsed shape of `mpirun [options] program [args]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchLine {
    pub launcher: String,
    /// Index into the command of the program's first word.
    pub program_index: usize,
    /// Number of ranks if `-n`/`-np` says so.
    pub ranks: Option<u32>,
}

/// Splits a launch command into launcher, options and program. Returns None when the command does
/// not start with a recognisable launcher or names no program.
pub fn parse_launch_line(cmd: &[String]) -> Option<LaunchLine> {
    let launcher = cmd.first()?.clone();
    let srun = is_srun(&launcher);
    let (with_value, with_two, rank_flags): (&[&str], &[&str], &[&str]) = if srun {
        (SRUN_OPTIONS_WITH_VALUE, &[], &["-n", "--ntasks"])
    } else {
        (
            OPTIONS_WITH_VALUE,
            OPTIONS_WITH_TWO_VALUES,
            &["-n", "-np", "--np", "-c"],
        )
    };
    let mut ranks = None;
    let mut i = 1;
    while i < cmd.len() {
        let word = cmd[i].as_str();
        if !word.starts_with('-') {
            return Some(LaunchLine {
                launcher,
                program_index: i,
                ranks,
            });
        }
        let (flag, inline_value) = match word.split_once('=') {
            // srun, like getopt, also takes a short option's value attached: `-n4`.
            None if srun
                && !word.starts_with("--")
                && word.len() > 2
                && with_value.contains(&&word[..2]) =>
            {
                (&word[..2], Some(&word[2..]))
            }
            Some((f, v)) => (f, Some(v)),
            None => (word, None),
        };
        let takes = if with_two.contains(&flag) {
            2
        } else if with_value.contains(&flag) {
            1
        } else {
            0
        };
        let value = inline_value.or_else(|| {
            (takes > 0)
                .then(|| cmd.get(i + 1).map(|s| s.as_str()))
                .flatten()
        });
        if rank_flags.contains(&flag) {
            ranks = value.and_then(|v| v.parse().ok());
        }
        i += 1 + if inline_value.is_some() { 0 } else { takes };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn finds_program_after_options_with_values() {
        let line =
            parse_launch_line(&words("mpirun --oversubscribe -np 4 -x FOO ./app -v 3")).unwrap();
        assert_eq!(line.program_index, 6);
        assert_eq!(line.ranks, Some(4));
        let line = parse_launch_line(&words("mpirun.mpich -genv A B -n 2 /bin/prog")).unwrap();
        assert_eq!(line.program_index, 6);
        assert_eq!(line.ranks, Some(2));
        let line = parse_launch_line(&words("mpiexec --np=8 prog")).unwrap();
        assert_eq!(line.program_index, 2);
        assert_eq!(line.ranks, Some(8));
    }

    #[test]
    fn srun_lines_are_parsed_with_srun_options() {
        let line =
            parse_launch_line(&words("srun --mpi pmix -c 2 -n 4 -p debug ./app -n 9")).unwrap();
        assert_eq!(line.program_index, 9);
        assert_eq!(line.ranks, Some(4));
        let line = parse_launch_line(&words("/usr/bin/srun -n2 --mpi=pmi2 -l app")).unwrap();
        assert_eq!(line.program_index, 4);
        assert_eq!(line.ranks, Some(2));
        let line = parse_launch_line(&words("srun --ntasks=3 -N 1 app")).unwrap();
        assert_eq!(line.program_index, 4);
        assert_eq!(line.ranks, Some(3));
    }

    #[test]
    fn no_program_is_none() {
        assert_eq!(parse_launch_line(&words("mpirun -np 4")), None);
        assert_eq!(parse_launch_line(&[]), None);
    }

    #[test]
    fn ldd_output_is_classified() {
        assert_eq!(
            classify_ldd("\tlibmpi.so.40 => /usr/lib/x86_64-linux-gnu/libmpi.so.40 (0x7f)"),
            Some(Mpi::OpenMpi)
        );
        assert_eq!(
            classify_ldd("\tlibmpich.so.12 => /usr/lib/x86_64-linux-gnu/libmpich.so.12 (0x7f)"),
            Some(Mpi::Mpich)
        );
        assert_eq!(classify_ldd("\tlibc.so.6 => /lib/libc.so.6"), None);
    }
}
