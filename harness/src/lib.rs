//! Experiment drivers that run real MPI jobs: the swap-versus-offload harness ([`swap`], the
//! paper's Table 1 on this machine) and [`validate`] (untraced against traced and reconstructed
//! runs of the user's own program). The simulator is the `sim` crate.

pub mod mpi;
pub mod swap;
pub mod validate;
