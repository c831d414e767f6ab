//! Where a run's files go: output directory patterns (`--out`, `EVENFLUSH_OUT`). The launcher,
//! the recorder in every rank and the readers expand them by the same rules.

use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// Checks the escapes of an output directory pattern: `%h` and `%%` only, so a typo such as `%H`
/// or a trailing `%` fails in the launcher instead of naming a surprising directory on every node.
pub fn check_out_pattern(dir: &Path) -> Result<(), String> {
    let bytes = dir.as_os_str().as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            match bytes.get(i + 1) {
                Some(b'h' | b'%') => i += 1,
                Some(&other) => {
                    return Err(format!(
                        "unknown escape %{} in {} (only %h, the host name, and %% are known)",
                        char::from(other),
                        dir.display()
                    ));
                }
                None => {
                    return Err(format!(
                        "{} ends in a lone % (write %% for a literal %)",
                        dir.display()
                    ));
                }
            }
        }
        i += 1;
    }
    Ok(())
}

/// Whether an output directory pattern depends on the host (`%h`).
pub fn out_is_per_host(dir: &Path) -> bool {
    let bytes = dir.as_os_str().as_bytes();
    let mut i = 0;
    while i + 1 < bytes.len() {
        if bytes[i] == b'%' {
            if bytes[i + 1] == b'h' {
                return true;
            }
            i += 1;
        }
        i += 1;
    }
    false
}

/// The directory a process on `host` writes to: `%h` replaced by `host`, `%%` by `%`. A host name
/// cannot add path components: `/` (and NUL) in it become `_`, and an empty or dot-only name
/// becomes `unknown-host`. Patterns are checked by [`check_out_pattern`] when parsed; anything
/// else after a `%` is kept as is.
pub fn expand_out(dir: &Path, host: &str) -> PathBuf {
    let mut safe: String = host
        .chars()
        .map(|c| if c == '/' || c == '\0' { '_' } else { c })
        .collect();
    if safe.is_empty() || safe.chars().all(|c| c == '.') {
        safe = "unknown-host".into();
    }
    let bytes = dir.as_os_str().as_bytes();
    let mut out = Vec::with_capacity(bytes.len() + safe.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1)) {
            (b'%', Some(b'h')) => {
                out.extend_from_slice(safe.as_bytes());
                i += 2;
            }
            (b'%', Some(b'%')) => {
                out.push(b'%');
                i += 2;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// The subdirectory of an output directory that a world started by `MPI_Comm_spawn` writes to:
/// `spawn-<key>`, `key` made by that world's rank 0 and equal on all of its ranks. Characters
/// that could leave the directory become `_`.
pub fn spawn_dir_name(key: &str) -> String {
    let safe: String = key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("spawn-{safe}")
}

/// Whether a directory entry's name is one [`spawn_dir_name`] makes.
pub fn is_spawn_dir_name(name: &str) -> bool {
    name.strip_prefix("spawn-").is_some_and(|key| {
        !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    })
}

#[cfg(test)]
mod spawn_tests {
    use super::*;

    #[test]
    fn spawn_directory_names_stay_inside_and_are_recognised() {
        assert_eq!(spawn_dir_name("18eabee1-1234"), "spawn-18eabee1-1234");
        assert_eq!(spawn_dir_name("../x/y"), "spawn-___x_y");
        assert!(is_spawn_dir_name(&spawn_dir_name("18eabee1-1234")));
        assert!(!is_spawn_dir_name("spawn-"));
        assert!(!is_spawn_dir_name("rank-00000.evf"));
    }
}
