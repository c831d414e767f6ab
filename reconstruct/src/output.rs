//! Where a reconstruction is written: the output directory, one rank file per rank (written
//! chunk by chunk, each file opened only while a chunk is appended, so the number of open files
//! does not grow with the number of ranks), and `meta.json`.

use std::io::Write;
use std::path::{Path, PathBuf};

use format::{ChunkEncoder, EncodedChunk, Event, EventBuf, FileHeader, encode_file_header};

use crate::options::{Options, RebuildError};
use trace::{RankFiles, Trace, TraceError};

pub(crate) fn output_error(path: &Path, source: std::io::Error) -> RebuildError {
    RebuildError::Output {
        path: path.to_path_buf(),
        source,
    }
}

/// Creates `out` (refusing the trace's own directory) and removes rank files of an earlier
/// reconstruction there, which would mix with ours; nothing else is touched.
pub(crate) fn prepare_out_dir(trace: &Trace, out: &Path) -> Result<(), RebuildError> {
    std::fs::create_dir_all(out).map_err(|e| output_error(out, e))?;
    if let (Ok(a), Ok(b)) = (out.canonicalize(), trace.dir.canonicalize())
        && a == b
    {
        return Err(RebuildError::BadOutput {
            path: out.to_path_buf(),
            what: "is the trace directory itself; choose another --out".into(),
        });
    }
    for entry in format::open_dir(out).map_err(TraceError::from)? {
        std::fs::remove_file(&entry.path).map_err(|e| output_error(&entry.path, e))?;
    }
    Ok(())
}

/// One rank's output file.
pub(crate) struct RankOutput {
    pub rank: u32,
    pub path: PathBuf,
}

impl RankOutput {
    /// Writes the file's header: the rank's own, with the output clock (global ns) and who made
    /// the file.
    pub fn create(
        files: &RankFiles,
        out: &Path,
        opts: &Options,
    ) -> Result<RankOutput, RebuildError> {
        let first = files.parts[0].open().map_err(TraceError::from)?;
        let original = first.header();
        let header = FileHeader {
            part: 0,
            clock: format::ClockCalibration {
                ticks_per_sec: 1e9,
                // With DP removed the output's calls cost nothing, clock reads included.
                read_ticks: if opts.remove.dp() {
                    0
                } else {
                    trace::clock::read_ns(&original.clock)
                        .round()
                        .min(f64::from(u16::MAX)) as u16
                },
                ..original.clock
            },
            producer: format!(
                "{} | reconstructed by evenflush {} (remove {})",
                original.producer,
                env!("CARGO_PKG_VERSION"),
                opts.remove.name()
            ),
            ..original.clone()
        };
        let path = out.join(format::rank_file_name(files.rank, 0));
        std::fs::write(&path, encode_file_header(&header)).map_err(|e| output_error(&path, e))?;
        Ok(RankOutput {
            rank: files.rank,
            path,
        })
    }

    /// The file of a rank another process of the job writes: named, never touched here.
    pub fn elsewhere(files: &RankFiles, out: &Path) -> RankOutput {
        RankOutput {
            rank: files.rank,
            path: out.join(format::rank_file_name(files.rank, 0)),
        }
    }

    /// Appends `chunks` in order, in one write (a system call costs more than copying a few
    /// small chunks).
    pub fn append(&self, chunks: &[EncodedChunk]) -> Result<(), RebuildError> {
        let bytes = match chunks {
            [] => return Ok(()),
            [one] => std::borrow::Cow::Borrowed(&one.bytes[..]),
            several => {
                std::borrow::Cow::Owned(several.iter().flat_map(|c| &c.bytes).copied().collect())
            }
        };
        let err = |e| output_error(&self.path, e);
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.path)
            .map_err(err)?;
        file.write_all(&bytes).map_err(err)
    }
}

/// Encoded chunks of one rank's file not appended yet: a file is opened for each append (open
/// files stay few), so small chunks are appended several at a time
/// ([`crate::options::output_bytes_per_write`]). Chunks are appended in the order they came.
#[derive(Default)]
pub(crate) struct Held {
    chunks: Vec<EncodedChunk>,
    bytes: usize,
}

impl Held {
    /// Holds `chunk`, and appends everything held once `bytes_per_write` bytes wait.
    pub fn add(
        &mut self,
        target: &RankOutput,
        chunk: EncodedChunk,
        bytes_per_write: usize,
    ) -> Result<(), RebuildError> {
        self.bytes += chunk.bytes.len();
        self.chunks.push(chunk);
        if self.bytes >= bytes_per_write {
            self.flush(target)?;
        }
        Ok(())
    }

    /// Appends everything held.
    pub fn flush(&mut self, target: &RankOutput) -> Result<(), RebuildError> {
        target.append(&self.chunks)?;
        self.chunks.clear();
        self.bytes = 0;
        Ok(())
    }
}

/// One lane's output events not yet encoded.
pub(crate) struct LaneOut {
    pub stream: u32,
    buf: EventBuf,
    events: usize,
    seq: u64,
}

impl LaneOut {
    pub fn new(stream: u32) -> LaneOut {
        LaneOut {
            stream,
            buf: EventBuf::new(),
            events: 0,
            seq: 0,
        }
    }

    /// Buffers `e`; true when the buffer holds a whole chunk.
    #[inline]
    pub fn push(&mut self, e: &Event, chunk_events: usize) -> bool {
        self.buf.push(e);
        self.events += 1;
        self.events >= chunk_events
    }

    pub fn is_empty(&self) -> bool {
        self.events == 0
    }

    /// Encodes what is buffered as the lane's next chunk.
    pub fn take_chunk(&mut self, encoder: &mut ChunkEncoder, rank: u32) -> EncodedChunk {
        let chunk = encoder.encode_events(rank, self.stream, self.seq, &self.buf);
        self.seq += 1;
        self.buf.clear();
        self.events = 0;
        chunk
    }

    /// What is buffered, as the lane's next chunk to be encoded elsewhere: its number in the
    /// stream and its events. `empty` (a spent buffer, cleared) takes their place.
    pub fn take_events(&mut self, empty: EventBuf) -> (u64, EventBuf) {
        let seq = self.seq;
        self.seq += 1;
        self.events = 0;
        (seq, std::mem::replace(&mut self.buf, empty))
    }
}

/// The trace's `meta.json`, saying it was reconstructed, from what, and how.
pub(crate) fn write_meta(trace: &Trace, out: &Path, opts: &Options) -> Result<(), RebuildError> {
    let mut meta = trace.meta.clone().unwrap_or_else(|| serde_json::json!({}));
    if let Some(obj) = meta.as_object_mut() {
        // Every part now lives in `out`: a pointer to the original output directories would make
        // readers pick up the unreconstructed files too.
        if let Some(settings) = obj.get_mut("settings").and_then(|s| s.as_object_mut()) {
            settings.remove("EVENFLUSH_OUT");
        }
        obj.insert(
            "reconstructed".into(),
            serde_json::json!({
                "from": trace.dir.display().to_string(),
                "remove": opts.remove.name(),
                "hb_repaired": opts.hb,
                "model": opts.model.name(),
                "clock": "global, ns",
            }),
        );
    }
    let path = out.join("meta.json");
    let text = serde_json::to_string_pretty(&meta).unwrap_or_else(|_| "{}".into());
    std::fs::write(&path, text).map_err(|source| RebuildError::Output { path, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_chunks_go_out_together_in_the_order_they_came() {
        let dir = std::env::temp_dir().join(format!("evf-held-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = RankOutput {
            rank: 0,
            path: dir.join("rank-00000.evf"),
        };
        std::fs::write(&target.path, b"H").unwrap();
        let chunk = |byte: u8, len: usize| EncodedChunk {
            bytes: vec![byte; len],
            raw_len: 0,
            stored_len: 0,
            events: 0,
            first_ts: 0,
            last_ts: 0,
        };
        let written = || std::fs::read(&target.path).unwrap();
        let mut held = Held::default();
        held.add(&target, chunk(b'a', 3), 8).unwrap();
        held.add(&target, chunk(b'b', 4), 8).unwrap();
        assert_eq!(written(), b"H", "7 bytes of 8 wait");
        held.add(&target, chunk(b'c', 2), 8).unwrap();
        assert_eq!(written(), b"Haaabbbbcc");
        held.add(&target, chunk(b'd', 1), 8).unwrap();
        assert_eq!(written(), b"Haaabbbbcc");
        held.flush(&target).unwrap();
        assert_eq!(written(), b"Haaabbbbccd");
        held.flush(&target).unwrap();
        assert_eq!(written(), b"Haaabbbbccd", "nothing held, nothing written");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
