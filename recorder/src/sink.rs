//! Writes taken buffers to this rank's file, `<out>/rank-NNNNN.evf`: one chunk per buffer, with a
//! sequence number per stream (thread). Write failures are never silent: the events are counted
//! as lost and reported once on stderr.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use format::{ChunkEncoder, FileHeader, RankFileWriter, RawBuf, rank_file_name};

use crate::buffers::Taken;

struct Sink {
    path: PathBuf,
    header: FileHeader,
    writer: Option<RankFileWriter<BufWriter<File>>>,
    encoder: ChunkEncoder,
    seq: HashMap<u32, u64>,
    failed: Option<String>,
    stats: SinkStats,
}

/// Totals over the life of the rank file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SinkStats {
    pub events_written: u64,
    pub bytes_raw: u64,
    pub bytes_stored: u64,
    pub chunks: u64,
    /// Events that could not be written (the write failed).
    pub events_lost: u64,
}

static SINK: Mutex<Option<Sink>> = Mutex::new(None);

/// Where the rank file goes; nothing is opened before the first write.
pub fn configure(dir: &Path, header: FileHeader, zstd_level: i32) {
    let path = dir.join(rank_file_name(header.rank, header.part));
    let mut guard = SINK.lock().unwrap_or_else(|e| e.into_inner());
    *guard = Some(Sink {
        path,
        header,
        writer: None,
        encoder: ChunkEncoder::new(zstd_level),
        seq: HashMap::new(),
        failed: None,
        stats: SinkStats::default(),
    });
}

pub fn path() -> Option<PathBuf> {
    SINK.lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map(|s| s.path.clone())
}

impl Sink {
    fn open(&mut self) -> std::io::Result<&mut RankFileWriter<BufWriter<File>>> {
        if self.writer.is_none() {
            if let Some(dir) = self.path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let file = File::create(&self.path)?;
            self.writer = Some(RankFileWriter::new(
                BufWriter::with_capacity(1 << 20, file),
                &self.header,
            )?);
        }
        Ok(self.writer.as_mut().expect("opened above"))
    }

    fn write_one(&mut self, stream: u32, buf: &RawBuf) {
        if buf.is_empty() {
            return;
        }
        if self.failed.is_some() {
            self.stats.events_lost += buf.events();
            return;
        }
        let seq = *self.seq.get(&stream).unwrap_or(&0);
        let chunk = self.encoder.encode(self.header.rank, stream, seq, buf);
        let result = self.open().and_then(|w| w.write_chunk(&chunk));
        match result {
            Ok(()) => {
                self.seq.insert(stream, seq + 1);
                self.stats.events_written += chunk.events;
                self.stats.bytes_raw += chunk.raw_len;
                self.stats.bytes_stored += chunk.bytes.len() as u64;
                self.stats.chunks += 1;
            }
            Err(e) => {
                self.stats.events_lost += buf.events();
                eprintln!(
                    "evenflush: rank {}: cannot write {}: {e}; further events of this rank are lost (counted)",
                    self.header.rank,
                    self.path.display()
                );
                self.failed = Some(e.to_string());
            }
        }
    }
}

/// Writes every taken buffer as one chunk and flushes the file. Returns the totals so far.
pub fn write(taken: &[Taken]) -> SinkStats {
    let mut guard = SINK.lock().unwrap_or_else(|e| e.into_inner());
    let Some(sink) = guard.as_mut() else {
        return SinkStats {
            events_lost: taken.iter().map(|t| t.buf.events()).sum(),
            ..SinkStats::default()
        };
    };
    for t in taken {
        sink.write_one(t.stream, &t.buf);
    }
    if sink.failed.is_none()
        && let Some(w) = sink.writer.as_mut()
        && let Err(e) = w.flush()
    {
        eprintln!(
            "evenflush: rank {}: flushing {}: {e}",
            sink.header.rank,
            sink.path.display()
        );
        sink.failed = Some(e.to_string());
    }
    sink.stats
}

/// Totals so far.
pub fn stats() -> SinkStats {
    SINK.lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map(|s| s.stats)
        .unwrap_or_default()
}
