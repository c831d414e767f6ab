//! The evenflush trace format: the event model, the in-memory raw buffer, chunk encoding and
//! framing, and a streaming reader. The byte-level specification is `FORMAT.md` beside this crate.

mod body;
pub mod chunk;
pub mod error;
pub mod framing;
pub mod funcs;
pub mod fuzzing;
pub mod group;
pub mod model;
pub mod naming;
pub mod parts;
pub mod profile;
pub mod raw;
pub mod reader;
pub mod requests;
pub mod synthetic;
mod varint;
pub mod walk;
pub mod writer;

pub use chunk::{ChunkEncoder, EncodedChunk, EventBuf};
pub use error::FormatError;
pub use framing::{FileHeader, TailKind, Truncation, encode_file_header};
pub use group::{GroupHeader, GroupIndex, GroupMember, group_file_name};
pub use model::*;
pub use parts::{DirListing, GroupFile, RankPart, list_dir};
pub use raw::RawBuf;
pub use reader::{
    Chunk, ChunkReader, MiscEvents, RankFile, RankFileEntry, Reached, blocks_lost, chunks_decoded,
    frames_decompressed, open_dir,
};
pub use walk::{ChunkWalk, WalkIssue};
pub use writer::{RankFileWriter, rank_file_name};
