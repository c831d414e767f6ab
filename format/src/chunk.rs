//! Chunks: a [`RawBuf`](crate::RawBuf) (or an [`EventBuf`]) turned into one self-describing,
//! checksummed unit of a rank file, and back. The chunk header is [`crate::framing`]'s; this
//! module holds the payload.
//!
//! The payload is columnar (see FORMAT.md "Payload: columns v1"): a kind byte per event, one
//! column per numeric field stored as byte planes (call start times as zigzag deltas from the
//! previous call's end), misc bodies in their own column. Since chunk version 9 the events are cut
//! into blocks of [`encode::BLOCK_EVENTS`], each laid out so and compressed on its own, behind a
//! block directory (FORMAT.md "Payload: blocks"), so a reader holds one block's bytes at a time.
//! FORMAT.md's "Design choices" section has the measurements this layout was chosen by.
//!
//! - [`columns`]: the column layout both sides share;
//! - [`encode`]: the encoder, the recorder's buffer's way into it, and the framing;
//! - [`event_buf`]: decoded events waiting to be encoded, and their way into the columns;
//! - [`older_versions`]: a chunk as an older version would hold it, for readers' tests;
//! - [`decode`]: checking a payload and reading its events back.

pub(crate) mod columns;
pub(crate) mod decode;
pub mod encode;
pub mod event_buf;
mod older_versions;

pub use encode::{ChunkEncoder, DEFAULT_LEVEL, EncodedChunk};
pub use event_buf::EventBuf;
