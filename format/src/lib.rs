//! The evenflush trace format: the event model, the in-memory raw buffer, chunk encoding and
//! framing, and a streaming reader. The byte-level specification is `FORMAT.md` beside this crate.

pub mod model;

pub use model::*;
