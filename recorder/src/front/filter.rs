//! Which MPI calls are recorded: `--include` / `--exclude` (function names, `*`/`?` globs, or
//! `class:CATEGORY` with the categories of `mpi_functions.tsv`) and `MPI_Pcontrol` levels (0
//! pauses recording, any other level resumes it, as in mpiP and Score-P).
//!
//! A call that is not recorded still does everything else the recorder does for it: its request
//! is tracked (so a recorded completion of it is not mistaken for another's), and a blocking
//! collective still counts towards the agreement on when to flush, which every rank must make at
//! the same collectives. Its completions are not recorded either: they would otherwise be read as
//! the previous recorded call's. `MPI_Init`, `MPI_Finalize` and `MPI_Pcontrol` are always
//! recorded, so a trace shows where recording paused.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use format::FunctionId;

use crate::functions::FUNCTIONS;

const WORDS: usize = FUNCTIONS.len().div_ceil(64);
/// Bit set per function id: not recorded.
static EXCLUDED: [AtomicU64; WORDS] = [const { AtomicU64::new(0) }; WORDS];
/// `MPI_Pcontrol(0)` was the last level set.
static PAUSED: AtomicBool = AtomicBool::new(false);

/// Some function is excluded (set by [`configure`]): calls must be checked one by one.
static ANY_EXCLUDED: AtomicBool = AtomicBool::new(false);

fn always_recorded(name: &str) -> bool {
    matches!(
        name,
        "MPI_Init" | "MPI_Init_thread" | "MPI_Finalize" | "MPI_Pcontrol"
    )
}

/// Case-insensitive glob with `*` (any run) and `?` (one character).
fn glob_matches(pattern: &[u8], name: &[u8]) -> bool {
    match (pattern.split_first(), name.split_first()) {
        (None, None) => true,
        (Some((b'*', rest)), _) => {
            glob_matches(rest, name) || (!name.is_empty() && glob_matches(pattern, &name[1..]))
        }
        (Some((b'?', rest)), Some((_, tail))) => glob_matches(rest, tail),
        (Some((p, rest)), Some((n, tail))) => p.eq_ignore_ascii_case(n) && glob_matches(rest, tail),
        _ => false,
    }
}

fn rule_matches(rule: &str, name: &str, category: &str) -> bool {
    match rule.strip_prefix("class:") {
        Some(class) => class.eq_ignore_ascii_case(category),
        None => glob_matches(rule.as_bytes(), name.as_bytes()),
    }
}

/// The functions `include` (all when empty) minus `exclude` leave unrecorded, by id. A rule that
/// names no wrapped function is an error: a misspelt filter would otherwise record everything,
/// or nothing, without a word.
pub fn excluded_ids(include: &[String], exclude: &[String]) -> Result<Vec<FunctionId>, String> {
    for rule in include.iter().chain(exclude) {
        if !FUNCTIONS.iter().any(|(n, c)| rule_matches(rule, n, c)) {
            return Err(format!(
                "filter rule {rule:?} matches no wrapped MPI function (names like MPI_Test, globs \
                 like MPI_*send*, or class:CATEGORY as in recorder/mpi_functions.tsv)"
            ));
        }
    }
    Ok(FUNCTIONS
        .iter()
        .enumerate()
        .filter(|(_, (name, category))| {
            let wanted =
                include.is_empty() || include.iter().any(|r| rule_matches(r, name, category));
            let unwanted = exclude.iter().any(|r| rule_matches(r, name, category));
            !always_recorded(name) && (!wanted || unwanted)
        })
        .map(|(id, _)| id as FunctionId)
        .collect())
}

/// Sets the filter for the rest of the run; returns how many functions it leaves out.
pub fn configure(include: &[String], exclude: &[String]) -> Result<usize, String> {
    let ids = excluded_ids(include, exclude)?;
    for word in &EXCLUDED {
        word.store(0, Ordering::Relaxed);
    }
    for &id in &ids {
        let i = usize::from(id);
        EXCLUDED[i / 64].fetch_or(1 << (i % 64), Ordering::Relaxed);
    }
    ANY_EXCLUDED.store(!ids.is_empty(), Ordering::Relaxed);
    Ok(ids.len())
}

/// `MPI_Pcontrol(level)` returned.
pub fn pcontrol(level: i32) {
    PAUSED.store(level == 0, Ordering::Relaxed);
}

/// Whether a call of `func` is recorded now (the caller remembers it for the call's
/// completions, `ThreadBuf::skipping`). Without filters and pauses this is two loads.
#[inline(always)]
pub fn admit_call(func: FunctionId) -> bool {
    if !ANY_EXCLUDED.load(Ordering::Relaxed) && !PAUSED.load(Ordering::Relaxed) {
        return true;
    }
    admit_call_filtered(func)
}

#[cold]
#[inline(never)]
fn admit_call_filtered(func: FunctionId) -> bool {
    let i = usize::from(func);
    let excluded = EXCLUDED
        .get(i / 64)
        .is_some_and(|w| w.load(Ordering::Relaxed) & (1 << (i % 64)) != 0);
    let paused = PAUSED.load(Ordering::Relaxed)
        && !FUNCTIONS.get(i).is_some_and(|(n, _)| always_recorded(n));
    !excluded && !paused
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(ids: &[FunctionId]) -> Vec<&'static str> {
        ids.iter().map(|&i| FUNCTIONS[usize::from(i)].0).collect()
    }

    #[test]
    fn globs_and_classes_select_functions() {
        assert!(glob_matches(b"MPI_*send*", b"MPI_Isend"));
        assert!(glob_matches(b"mpi_test", b"MPI_Test"));
        assert!(!glob_matches(b"MPI_Test", b"MPI_Testall"));
        assert!(glob_matches(b"MPI_Test?ll", b"MPI_Testall"));
        let out = names(&excluded_ids(&[], &["MPI_Test*".into(), "class:probe".into()]).unwrap());
        assert!(out.contains(&"MPI_Testany") && out.contains(&"MPI_Iprobe"));
        assert!(!out.contains(&"MPI_Wait") && !out.contains(&"MPI_Send"));
        // Only what is included is recorded, and never without Init, Finalize and Pcontrol.
        let out = names(&excluded_ids(&["class:collective-blocking".into()], &[]).unwrap());
        assert!(out.contains(&"MPI_Send") && !out.contains(&"MPI_Barrier"));
        assert!(!out.contains(&"MPI_Init") && !out.contains(&"MPI_Pcontrol"));
        assert!(excluded_ids(&[], &["MPI_Tset".into()]).is_err());
    }
}
