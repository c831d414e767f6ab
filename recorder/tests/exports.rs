//! Every MPI function the installed MPIs export is either wrapped (a row of `mpi_functions.tsv`)
//! or deliberately left out (`mpi_excluded.tsv`, with a reason per class). A new MPI version that
//! adds functions makes this fail until each is covered or excluded.
//!
//! The libraries are found the way the preload build finds them (`mpicc -show`,
//! `mpicc.mpich -show`) and read with `nm -D --defined-only`. When a preload library has been
//! built, it must also export a wrapper for every table row its MPI exports.

#[path = "../../tests/common/skip.rs"]
mod skip;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

const RECORDER: &str = env!("CARGO_MANIFEST_DIR");

struct Mpi {
    flavour: &'static str,
    cc: &'static str,
}

const MPIS: [Mpi; 2] = [
    Mpi {
        flavour: "openmpi",
        cc: "mpicc",
    },
    Mpi {
        flavour: "mpich",
        cc: "mpicc.mpich",
    },
];

fn table() -> Vec<String> {
    std::fs::read_to_string(Path::new(RECORDER).join("mpi_functions.tsv"))
        .expect("read mpi_functions.tsv")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split('\t').next().unwrap_or_default().trim().to_string())
        .collect()
}

struct Exclusion {
    pattern: String,
    class: String,
    reason: String,
}

fn exclusions() -> Vec<Exclusion> {
    std::fs::read_to_string(Path::new(RECORDER).join("mpi_excluded.tsv"))
        .expect("read mpi_excluded.tsv")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let cols: Vec<&str> = l.split('\t').collect();
            assert!(
                cols.len() == 3 && cols.iter().all(|c| !c.trim().is_empty()),
                "mpi_excluded.tsv: `{l}` needs a pattern, a class and a reason"
            );
            Exclusion {
                pattern: cols[0].trim().to_string(),
                class: cols[1].trim().to_string(),
                reason: cols[2].trim().to_string(),
            }
        })
        .collect()
}

/// `*` matches any run of characters; everything else matches itself.
fn glob(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, rest)) => {
            let Some(tail) = name.strip_prefix(head) else {
                return false;
            };
            (0..=tail.len()).any(|i| tail.is_char_boundary(i) && glob(rest, &tail[i..]))
        }
    }
}

/// The shared libraries `cc -show` links (`-L` dirs searched for `lib<name>.so`), or `None`
/// when that MPI is not installed.
fn libraries(cc: &str) -> Option<Vec<PathBuf>> {
    let out = Command::new(cc).arg("-show").output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut dirs: Vec<PathBuf> = text
        .split_whitespace()
        .filter_map(|t| t.strip_prefix("-L"))
        .map(PathBuf::from)
        .collect();
    dirs.extend(
        ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"]
            .iter()
            .map(PathBuf::from),
    );
    let libs: Vec<PathBuf> = text
        .split_whitespace()
        .filter_map(|t| t.strip_prefix("-l"))
        .filter_map(|l| {
            dirs.iter()
                .map(|d| d.join(format!("lib{l}.so")))
                .find(|p| p.exists())
        })
        .collect();
    assert!(
        !libs.is_empty(),
        "`{cc} -show` names no library found on disk: {text}"
    );
    Some(libs)
}

/// The `MPI_`/`MPIX_` functions (not data objects) a shared library defines.
fn exported_functions(lib: &Path) -> BTreeSet<String> {
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib)
        .output()
        .expect("run nm (binutils)");
    assert!(out.status.success(), "nm -D {} failed", lib.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut cols = l.split_whitespace().rev();
            let name = cols.next()?;
            let kind = cols.next()?;
            // T/W: (weak) functions; i: indirect functions. D/B/R are data (MPI_F_STATUS_IGNORE).
            (matches!(kind, "T" | "W" | "i")
                && (name.starts_with("MPI_") || name.starts_with("MPIX_")))
            .then(|| name.to_string())
        })
        .collect()
}

fn preload_library(flavour: &str) -> Option<PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(RECORDER).join("../target"));
    let table_time = std::fs::metadata(Path::new(RECORDER).join("mpi_functions.tsv"))
        .and_then(|m| m.modified())
        .ok()?;
    ["release", "debug"]
        .iter()
        .map(|p| target.join(p).join(format!("libevenflush_{flavour}.so")))
        .filter(|p| {
            // Only a library built from the current table says anything about it.
            std::fs::metadata(p)
                .and_then(|m| m.modified())
                .is_ok_and(|t| t >= table_time)
        })
        .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
}

#[test]
fn every_exported_mpi_function_is_wrapped_or_excluded() {
    let table: BTreeSet<String> = table().into_iter().collect();
    let excluded = exclusions();
    for e in &excluded {
        let clash: Vec<&String> = table.iter().filter(|f| glob(&e.pattern, f)).collect();
        assert!(
            clash.is_empty(),
            "mpi_excluded.tsv pattern {} ({}) matches wrapped functions {clash:?}",
            e.pattern,
            e.class
        );
        assert!(!e.reason.is_empty());
    }
    let mut used = vec![false; excluded.len()];
    let mut seen_any = false;
    let mut problems = Vec::new();
    for mpi in &MPIS {
        let Some(libs) = libraries(mpi.cc) else {
            skip::skip_or_fail(
                mpi.flavour,
                &format!(
                    "{} not found: {}'s exports are not checked",
                    mpi.cc, mpi.flavour
                ),
            );
            continue;
        };
        seen_any = true;
        let exported: BTreeSet<String> = libs.iter().flat_map(|l| exported_functions(l)).collect();
        let mut wrapped = 0;
        let mut left_out = 0;
        for f in &exported {
            if table.contains(f) {
                wrapped += 1;
                continue;
            }
            match excluded.iter().position(|e| glob(&e.pattern, f)) {
                Some(i) => {
                    used[i] = true;
                    left_out += 1;
                    for (j, e) in excluded.iter().enumerate() {
                        if glob(&e.pattern, f) {
                            used[j] = true;
                        }
                    }
                }
                None => problems.push(format!(
                    "{}: {f} is exported by {} but neither wrapped (mpi_functions.tsv) nor \
                     excluded with a reason (mpi_excluded.tsv)",
                    mpi.flavour,
                    libs.iter()
                        .map(|l| l.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            }
        }
        println!(
            "{}: {} MPI functions exported, {wrapped} wrapped, {left_out} deliberately excluded",
            mpi.flavour,
            exported.len()
        );

        // The build keeps only the rows the MPI's headers declare: a wrapper missing for a function
        // the library exports means the header check and the library disagree.
        if let Some(preload) = preload_library(mpi.flavour) {
            let wrappers = exported_functions(&preload);
            for f in exported.iter().filter(|f| table.contains(*f)) {
                if !wrappers.contains(f) {
                    problems.push(format!(
                        "{}: {f} is in the table and exported by the MPI, but {} has no wrapper for it",
                        mpi.flavour,
                        preload.display()
                    ));
                }
            }
            for f in wrappers.iter().filter(|f| !exported.contains(*f)) {
                problems.push(format!(
                    "{}: {} wraps {f}, which the MPI does not export",
                    mpi.flavour,
                    preload.display()
                ));
            }
        }
    }
    if seen_any && MPIS.iter().all(|m| libraries(m.cc).is_some()) {
        for (e, used) in excluded.iter().zip(&used) {
            if !used {
                problems.push(format!(
                    "mpi_excluded.tsv pattern {} ({}) matches no function of any installed MPI: stale",
                    e.pattern, e.class
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn glob_matches_like_the_exclusion_list_means() {
    assert!(glob("MPI_T_*", "MPI_T_pvar_read"));
    assert!(!glob("MPI_T_*", "MPI_Test"));
    assert!(glob("*_c2f", "MPI_Comm_c2f"));
    assert!(glob("MPI_*_errhandler", "MPI_Comm_set_errhandler"));
    assert!(!glob("MPI_*_errhandler", "MPI_Errhandler_free"));
    assert!(glob("MPI_Wtime", "MPI_Wtime"));
    assert!(!glob("MPI_Wtime", "MPI_Wtick"));
}
