//! A panic in one of the recorder's own threads ends the process with SIGABRT and says which
//! thread, instead of ending only that thread while the job goes on without it (the workspace
//! unwinds on panic since CI stopped building every crate twice; see Cargo.toml).
//!
//! The test runs itself again as a child, which starts a recorder thread that panics.

use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::time::Duration;

const CHILD: &str = "EVENFLUSH_TEST_THREAD_PANIC_CHILD";

#[test]
fn a_panicking_recorder_thread_aborts_the_process() {
    if std::env::var_os(CHILD).is_some() {
        let handle =
            recorder::lifecycle::threads::spawn("evenflush-doomed", || panic!("on purpose"))
                .expect("a thread");
        let _ = handle.join();
        // Reached only if the panic ended the thread and not the process.
        std::thread::sleep(Duration::from_millis(50));
        std::process::exit(0);
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_panicking_recorder_thread_aborts_the_process",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD, "1")
        .output()
        .expect("the child test process");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGABRT),
        "the child ended with {:?}, not SIGABRT; its stderr:\n{stderr}",
        out.status
    );
    assert!(
        stderr.contains("recorder's thread evenflush-doomed: aborting"),
        "{stderr}"
    );
}
