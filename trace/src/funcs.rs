//! Classification of MPI functions by name: owned by the format crate (the profile statistics
//! need it there); re-exported here for the reconstruct modules.

pub use format::funcs::*;
