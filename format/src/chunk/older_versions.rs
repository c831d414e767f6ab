//! A chunk as an older chunk version would hold it, for tests of readers against the traces of
//! older recorders: the recorder and reconstruction always write the current version.

use super::columns::*;
use super::encode::{ChunkEncoder, EncodedChunk};
use super::event_buf::EventBuf;
use crate::framing::{
    CHUNK_BLOCKS_VERSION, CHUNK_HEADER_LEN, CHUNK_MIN_VERSION, CHUNK_VERSION, CODEC_NONE,
    ChunkHeader,
};
use crate::varint::{get_u64, put_u64};

impl EncodedChunk {
    /// This chunk as an older chunk `version` would hold it (1 to [`CHUNK_VERSION`]): the columns
    /// that version lacks are dropped, with their values, and the payload is stored uncompressed
    /// (before version 9, as one payload; at version 9, in blocks). Misc events of kinds newer
    /// than `version` stay, so a reader must refuse the result: tests of readers against traces
    /// of older recorders use this, the recorder never does.
    pub fn as_version(&self, version: u16) -> Result<EncodedChunk, String> {
        let header_bytes: &[u8; CHUNK_HEADER_LEN] = self
            .bytes
            .get(..CHUNK_HEADER_LEN)
            .and_then(|h| h.try_into().ok())
            .ok_or("no chunk header")?;
        let h = ChunkHeader::from_bytes(header_bytes);
        if !(CHUNK_MIN_VERSION..=CHUNK_VERSION).contains(&version) {
            return Err(format!("no chunk version {version}"));
        }
        if h.version >= CHUNK_BLOCKS_VERSION {
            // Back to events, then into one block: the payload of a version before 9.
            let chunk = crate::reader::ChunkReader::new(&self.bytes, 0, "as_version".as_ref())
                .next()
                .ok_or("no chunk")?
                .map_err(|e| e.to_string())?;
            let mut buf = EventBuf::new();
            chunk.events().for_each(|e| buf.push(&e));
            let mut encoder = ChunkEncoder::uncompressed();
            if version >= CHUNK_BLOCKS_VERSION {
                return Ok(encoder.encode_events(h.rank, h.stream, h.seq, &buf));
            }
            let whole = encoder
                .with_block_events(usize::MAX)
                .encode_events(h.rank, h.stream, h.seq, &buf);
            let mut one = whole;
            // Drop the directory (one block, or none for an empty chunk) and relabel.
            let stored = one.bytes.split_off(CHUNK_HEADER_LEN);
            let mut pos = 0;
            let blocks = get_u64(&stored, &mut pos).ok_or("bad block directory")?;
            for _ in 0..blocks * 3 {
                get_u64(&stored, &mut pos).ok_or("bad block directory")?;
            }
            let payload = if blocks == 0 {
                // An empty chunk: the empty columns payload of the old layout.
                let mut p = vec![NUM_COLUMNS as u8];
                p.extend(std::iter::repeat_n(0u8, NUM_COLUMNS));
                for col in COL_FUNC..COL_MISC {
                    p[1 + col] = 1;
                    p.push(0);
                }
                p
            } else {
                stored[pos..].to_vec()
            };
            return self
                .stored_as(h, CHUNK_BLOCKS_VERSION - 1, payload)
                .as_version(version);
        }
        let stored = &self.bytes[CHUNK_HEADER_LEN..];
        let payload = match h.codec {
            CODEC_NONE => stored.to_vec(),
            _ => zstd::bulk::decompress(stored, h.raw_len as usize).map_err(|e| e.to_string())?,
        };
        let count = *payload.first().ok_or("empty payload")? as usize;
        let mut pos = 1;
        let mut lens = Vec::with_capacity(count);
        for _ in 0..count {
            lens.push(get_u64(&payload, &mut pos).ok_or("bad column directory")? as usize);
        }
        // The columns of this payload's own version, in order, with where each starts.
        let cols: Vec<usize> = (0..NUM_COLUMNS)
            .filter(|&c| has_column(h.version, c))
            .collect();
        if cols.len() != count {
            return Err("unexpected number of columns".into());
        }
        let kept: Vec<(usize, usize)> = cols
            .iter()
            .zip(&lens)
            .scan(pos, |at, (&col, &len)| {
                let start = *at;
                *at += len;
                Some((col, start))
            })
            .filter(|&(col, _)| has_column(version, col))
            .collect();
        let len_of = |col: usize| lens[cols.iter().position(|&c| c == col).unwrap_or(0)];
        let mut out = vec![kept.len() as u8];
        for &(col, _) in &kept {
            put_u64(&mut out, len_of(col) as u64);
        }
        for &(col, start) in &kept {
            let end = start + len_of(col);
            out.extend_from_slice(payload.get(start..end).ok_or("column past the payload")?);
        }
        Ok(self.stored_as(h, version, out))
    }

    /// This chunk's events as a chunk of `version` whose payload, stored as is, is `payload`.
    fn stored_as(&self, mut h: ChunkHeader, version: u16, payload: Vec<u8>) -> EncodedChunk {
        h.version = version;
        h.codec = CODEC_NONE;
        h.raw_len = payload.len() as u64;
        h.stored_len = payload.len() as u64;
        h.payload_crc = crc32c::crc32c(&payload);
        let mut bytes = h.to_bytes().to_vec();
        bytes.extend_from_slice(&payload);
        EncodedChunk {
            bytes,
            raw_len: h.raw_len,
            stored_len: h.stored_len,
            events: self.events,
            first_ts: self.first_ts,
            last_ts: self.last_ts,
        }
    }
}
