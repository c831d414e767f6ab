//! The recorder's own threads (memory watcher, signal helper, watchdog, bounded abort flush).
//!
//! A panic in one of them ends the process, as a panic on an MPI call's path does (Rust aborts
//! when a panic reaches an `extern "C"` function). Left to unwind, it would end only its thread:
//! the job would go on without its memory samples or its watchdog, or wait for a flush that
//! never comes, with nothing said. The release profile unwinds because the test harness needs
//! it, and one panic strategy for the whole workspace spares CI a second build of every crate.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::thread::{Builder, JoinHandle};

/// Starts the recorder thread `name` running `body`; a panic in `body` aborts the process after
/// saying which thread it was (the panic message itself is printed by the panic hook before).
pub fn spawn<T, F>(name: &str, body: F) -> std::io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let owned = name.to_string();
    Builder::new().name(owned.clone()).spawn(move || {
        match catch_unwind(AssertUnwindSafe(body)) {
            Ok(value) => value,
            Err(_) => {
                say!("evenflush: internal error in the recorder's thread {owned}: aborting the process");
                std::process::abort()
            }
        }
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_thread_without_a_panic_returns_its_value() {
        let handle = super::spawn("evenflush-test", || 7).unwrap();
        assert_eq!(handle.join().unwrap(), 7);
        // The abort path ends the test process, so it is checked from outside
        // (recorder/tests/thread_panic.rs).
    }
}
