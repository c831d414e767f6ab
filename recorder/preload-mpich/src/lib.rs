//! The evenflush recorder for mpich programs: the generated C layer (compiled by the build script
//! against mpich's `mpi.h`) plus the MPI-agnostic Rust core, as one LD_PRELOAD library.

// The C layer calls the core's hooks; naming the crate keeps it linked.
pub use recorder;

/// Trace blocks on transparent huge pages (one page fault per 2 MiB block instead of 512).
#[global_allocator]
static ALLOCATOR: recorder::alloc::HugeBlockAlloc = recorder::alloc::HugeBlockAlloc;
