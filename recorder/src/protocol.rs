//! Where the offload protocol plugs in. In mode `off` (all this crate implements) these do nothing;
//! the suspension protocol fills them. They run inside the wrapper of the MPI call (the C layer's
//! re-entry guard is held, so MPI calls made here through [`crate::mpi_link`] are not recorded),
//! and must never panic.

use format::{CommId, FunctionId};

/// Called at the end of every blocking collective (and blocking neighbourhood collective), after
/// its record was stored. [`crate::comm_spans_world`] tells whether `comm` contains every rank.
pub fn after_blocking_collective(comm: CommId, func: FunctionId) {
    let _ = (comm, func);
}

/// Called once at the end of `MPI_Init`/`MPI_Init_thread`, after the `InitDone` marker; the
/// private transport is available (initial clock-offset measurement goes here).
pub fn on_init_done() {}

/// Called at entry to `MPI_Finalize`, after the `FinalizeStart` marker and while the transport is
/// still available (final clock-offset measurement goes here).
pub fn on_finalize_start() {}
