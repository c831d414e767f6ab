//! The back end: what happens to the buffers once they are full enough. The offload protocol's
//! flush decision and equalised suspension, the threshold S, the hard limit, memory samples, and
//! the sink that writes the trace (writers, group files, MPI-IO).
//!
//! The front end reaches it only through [`crate::buffer_grew`] (a buffer took a new block) and
//! the blocking-collective hook the C layer calls ([`protocol::after_blocking_collective`]).

pub mod group_file;
pub mod limit;
pub mod memory;
pub mod memory_watch;
pub mod mpiio;
pub mod node;
pub mod node_share;
pub mod protocol;
pub mod sink;
pub mod threshold;
pub mod transport;
