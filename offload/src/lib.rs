//! The equalised suspension (paper Fig. 3 and 5): decide, flush, compute Z, wait. Generic over a
//! `Transport`, so the same protocol code runs in the real recorder, in in-process tests and in the
//! simulator.
//!
//! - [`transport`]: the [`Transport`] trait the protocol is written against;
//! - [`inproc`]: threads-as-ranks transport with injectable skew, drift and latency, for tests;
//! - [`clock`]: clock offsets to rank 0 by ping-pong, with m and d;
//! - [`tree`]: the binomial tree rooted at rank 0 that Z and the tree clock scheme travel along;
//! - [`suspension`]: the protocol and its modes, and [`flush`], what its flush reports back;
//! - [`config`]: the run settings (the modes, decisions and clock schemes among them);
//! - [`writer`]: the trace writers (posix, io_uring) with rotation over output directories.

pub mod clock;
pub mod config;
pub mod flush;
pub mod inproc;
pub mod suspension;
pub mod transport;
pub mod tree;
pub mod writer;

pub use clock::{ClockSync, measure_offsets, measure_offsets_async, measure_offsets_blocking};
pub use config::ClockScheme;
pub use flush::FlushReport;
pub use suspension::{Decision, Held, Mode, Remedy, Settings, Suspended, Suspender};
pub use transport::{AsyncTransport, Blocking, ReduceOp, Tag, Transport, TransportError, block_on};
pub use tree::tree_broadcast;

/// Message tags of the protocol. A transport on a private communicator can use them as they are;
/// anything else it sends must stay clear of `BASE..BASE + 16`. All stay below 32767, the smallest
/// `MPI_TAG_UB` the MPI standard allows.
pub mod protocol_tags {
    use crate::transport::Tag;
    pub const BASE: Tag = 0x4546;
    pub const CLOCK_PING: Tag = BASE + 1;
    pub const CLOCK_PONG: Tag = BASE + 2;
    pub const CLOCK_OFFSET: Tag = BASE + 3;
    pub const CLOCK_RTT_INDEX: Tag = BASE + 4;
    pub const CLOCK_M_D: Tag = BASE + 5;
    pub const SUSPENSION_Z: Tag = BASE + 6;
    pub const CLOCK_BOUND: Tag = BASE + 7;
}
