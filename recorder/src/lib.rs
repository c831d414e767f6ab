//! The Rust core of the evenflush LD_PRELOAD recorder. It knows nothing about MPI types: the C
//! layer generated from `mpi_functions.tsv` (built into one preload library per MPI ABI by
//! `recorder/preload-openmpi` and `recorder/preload-mpich`) intercepts the calls, turns handles into
//! integers and calls the hooks in [`ffi`].
//!
//! What the offload protocol needs from here:
//! - [`take_all_buffers`]: every thread's buffered events, taken out (memory freed);
//! - [`held_bytes`]: buffer memory held now, to compare with the threshold S;
//! - [`mpi_link::link`]: the private transport (collectives and point-to-point on a duplicate of
//!   `MPI_COMM_WORLD`);
//! - the hooks in [`protocol`], called after blocking collectives and at init/finalize;
//! - [`record_event`] to store suspension records, clock samples and markers;
//! - [`sink::write`] to append taken buffers to the rank file.

pub mod alloc;
pub mod buffers;
pub mod callsites;
pub mod clock;
pub mod core;
pub mod ffi;
pub mod filter;
pub mod group_file;
pub mod memory;
pub mod memory_watch;
pub mod mpi_link;
pub mod mpiio;
pub mod protocol;
pub mod requests;
pub mod signals;
pub mod sink;
pub mod threshold;
pub mod watchdog;

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

pub use buffers::held_bytes;
pub use core::{active, finish, record_event, session, take_all_buffers};
pub use ffi::comm_spans_world;
pub use protocol::after_blocking_collective;

#[cfg(test)]
mod tests;
