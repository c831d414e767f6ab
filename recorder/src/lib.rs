//! The Rust core of the evenflush LD_PRELOAD recorder. It knows nothing about MPI types: the C
//! layer generated from `mpi_functions.tsv` (built into one preload library per MPI ABI by
//! `recorder/preload-openmpi` and `recorder/preload-mpich`) intercepts the calls, turns handles into
//! integers and calls the hooks in [`ffi`].
//!
//! Three parts, one folder each:
//! - [`front`]: the hot path. Each recorded call goes into its thread's buffer, with its cost;
//! - [`lifecycle`]: the session from `MPI_Init` to the end of recording (finalize, abort, exit,
//!   signals, fork, the watchdog);
//! - [`back`]: what the buffers become. The protocol's flush decision and equalised
//!   suspension, the threshold S, the hard limit, memory samples and the sink that writes.
//!
//! The front end hands over to the back end through one hook, [`buffer_grew`]; the back end uses
//! the small API [`front`] re-exports (store an event, take the buffers, their size, charge
//! time). Beside them: [`ffi`] (the C layer's entry points), [`mpi_link`] (the C layer's private
//! MPI communicator), [`clock`] and [`alloc`] (the trace blocks' allocator).

/// A line on standard error, written with one `write(2)`. Every rank of a job shares the
/// launcher's standard error, and `eprintln!` (unbuffered: a write per formatted piece) let two
/// ranks' lines interleave mid-line. It also never panics, where `eprintln!` does if standard
/// error is closed: the recorder runs inside the program's MPI calls.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::say_line(format!($($arg)*))
    };
}

/// See [`say!`].
pub(crate) fn say_line(mut line: String) {
    use std::io::Write;
    line.push('\n');
    let _ = std::io::stderr().write_all(line.as_bytes());
}

pub mod alloc;
pub mod back;
pub mod clock;
pub mod ffi;
pub mod front;
pub mod lifecycle;
pub mod mpi_link;

/// The wrapped functions, by `FunctionId`.
pub mod functions {
    include!(concat!(env!("OUT_DIR"), "/function_table.rs"));

    /// The covered-functions document generated from the same table.
    pub const FUNCTIONS_MD: &str = include_str!(concat!(env!("OUT_DIR"), "/FUNCTIONS.md"));

    /// [`id_of`] at compile time (`FUNCTIONS.len()` if the name is not wrapped).
    pub const fn const_id_of(name: &str) -> format::FunctionId {
        let want = name.as_bytes();
        let mut i = 0;
        while i < FUNCTIONS.len() {
            let have = FUNCTIONS[i].0.as_bytes();
            if have.len() == want.len() {
                let mut k = 0;
                while k < want.len() && have[k] == want[k] {
                    k += 1;
                }
                if k == want.len() {
                    return i as format::FunctionId;
                }
            }
            i += 1;
        }
        FUNCTIONS.len() as format::FunctionId
    }

    /// The id of a wrapped function by its C name.
    pub fn id_of(name: &str) -> Option<format::FunctionId> {
        FUNCTIONS
            .iter()
            .position(|(n, _)| *n == name)
            .map(|i| i as format::FunctionId)
    }
}

pub use back::protocol::after_blocking_collective;
pub use ffi::comm_spans_world;
pub use front::{held_bytes, record_event, take_all_buffers};
pub use lifecycle::finish::finish;
pub use lifecycle::session::{active, session};

/// The front end's one hook into the back end: a thread's buffer took a new block (rare: once per
/// block of [`front::buffers::BLOCK_SIZE`], never per event). The back end decides what follows
/// (mode `local`'s flush past S, a memory sample, the hard limit). It lives here, where the
/// parts are wired together, so that the front end names nothing of the back end.
#[inline]
pub(crate) fn buffer_grew() {
    back::limit::after_buffer_growth();
}

#[cfg(test)]
mod tests;
