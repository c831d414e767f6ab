//! The front end: what runs on every MPI call the wrappers record. Storing an event into this
//! thread's buffer, the cheap checks on the way (filter, request ids, call sites) and the cost
//! charged to each event. It calls nothing of the back end but the one growth hook,
//! [`crate::buffer_grew`], when a buffer took a new block.
//!
//! What the rest of the recorder uses of it is re-exported here.

pub mod buffers;
pub mod callsites;
pub mod cost;
pub mod filter;
pub mod origins;
pub mod record;
pub mod requests;

pub use buffers::{Taken, held_bytes, take_all_buffers, used_bytes};
pub use cost::{carry, charge};
pub use record::record_event;
