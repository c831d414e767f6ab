//! Skips that fail unless someone allowed them: CI must not be green when a feature never ran.
//!
//! Shared by every test crate of the workspace: the root package includes it from
//! `tests/common/mod.rs`, the other crates with `#[path = "../../tests/common/skip.rs"] mod skip;`
//! (they cannot use the root package's `tests/common`).
#![allow(dead_code)]

use std::io::Write;

/// Comma-separated names of the skips that are allowed, e.g. `EVENFLUSH_TEST_ALLOW_SKIP=tmpfs,otf2`.
pub const ALLOW_SKIP_VAR: &str = "EVENFLUSH_TEST_ALLOW_SKIP";

/// The prefix of every allowed skip's line on stderr; `scripts/test.sh` lists those lines at the end.
pub const SKIPPED_PREFIX: &str = "SKIPPED:";

/// Whether the skip `name` is listed in [`ALLOW_SKIP_VAR`].
pub fn skip_allowed(name: &str) -> bool {
    std::env::var(ALLOW_SKIP_VAR)
        .unwrap_or_default()
        .split(',')
        .any(|allowed| allowed.trim() == name)
}

/// A test that cannot exercise what it is for calls this and returns: it panics unless `name` is
/// allowed, and an allowed skip is printed straight to the process's stderr (the test harness
/// captures `eprintln!` of passing tests, which would hide the skip).
pub fn skip_or_fail(name: &str, reason: &str) {
    if !skip_allowed(name) {
        panic!(
            "skip '{name}' not allowed: {reason} (set {ALLOW_SKIP_VAR}={name} to accept that this \
             test did not run)"
        );
    }
    let line = format!("{SKIPPED_PREFIX} {name}: {reason}\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}
