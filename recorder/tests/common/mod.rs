//! Starting a recorder session the way the C layer's `MPI_Init` wrapper does, without MPI, for
//! the tests that drive the hooks in a process of their own.

use std::path::PathBuf;

use recorder::ffi;

/// Sets the output to a fresh directory named after `tag` (returned) with offloading off, then
/// runs the init hooks as rank `rank` of `size`, with `MPI_COMM_WORLD` (communicator 0) defined.
/// `MPI_Init`'s end (`evf_rust_init_done`) is left to the caller, which may time it.
pub fn start_session(tag: &str, rank: i32, size: i32) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("evenflush-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // SAFETY (edition 2024 requires `unsafe` for set_var): each caller is the only test in its
    // process, and nothing reads the variables concurrently.
    unsafe {
        std::env::set_var("EVENFLUSH_OUT", &dir);
        std::env::set_var("EVENFLUSH_MODE", "off");
    }
    assert!(ffi::evf_rust_pre_init() == 0 || cfg!(target_arch = "x86_64"));
    assert_eq!(ffi::evf_rust_init(rank, size, 0), 1);
    let members: Vec<i32> = (0..size).collect();
    // SAFETY: valid pointer/length pair.
    unsafe { ffi::evf_rec_commdef(0, members.as_ptr(), size) };
    dir
}
