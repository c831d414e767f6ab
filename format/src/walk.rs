//! Walking one rank's chunks across all its parts, the way every reader should: resuming at the
//! next intact chunk after damage, reading each `(stream, seq)` once, and saying exactly what was
//! lost or skipped. Readers that need different passes over a rank (the metadata pre-pass, one
//! pass per thread stream) all walk through here, so they agree on which chunks exist.

use std::collections::HashMap;
use std::path::PathBuf;

use crate::framing::{ChunkHeader, TailKind};
use crate::reader::{Chunk, ChunkReader, RankFile, Reached};

/// Something the walk could not read or chose not to read, with where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalkIssue {
    pub file: PathBuf,
    pub offset: u64,
    pub what: String,
}

/// Which chunks a walk decodes, by their header.
type WantChunk<'a> = Box<dyn Fn(&ChunkHeader) -> bool + Send + 'a>;

/// The valid chunks of one rank, in order, over all its parts (see the module docs).
pub struct ChunkWalk<'a> {
    files: &'a [RankFile],
    next_file: usize,
    current: Option<(ChunkReader<'a>, &'a RankFile)>,
    /// Only chunks of this stream are handed out (others are still checked for order).
    stream: Option<u32>,
    next_seq: HashMap<u32, u64>,
    issues: Vec<WalkIssue>,
    /// Which chunks to decode, by header; the others are verified and passed over.
    want: Option<WantChunk<'a>>,
    passed: u64,
    /// Per stream, events of the chunks taken in order so far (read or passed over): what the
    /// matching numbers a lane's events by (`EventRef::index`), so a windowed read can name an
    /// event as the kept match index does without decoding the chunks before it.
    counted: HashMap<u32, u64>,
    /// The stream index of the first event of the chunk last handed out.
    first_index: u64,
    /// Release each file's bytes behind the chunk handed out (see [`ChunkWalk::releasing`]):
    /// from here on in the current file.
    release_from: Option<u64>,
}

impl<'a> ChunkWalk<'a> {
    /// Every stream's chunks.
    pub fn new(files: &'a [RankFile]) -> Self {
        ChunkWalk {
            files,
            next_file: 0,
            current: None,
            stream: None,
            next_seq: HashMap::new(),
            issues: Vec::new(),
            want: None,
            passed: 0,
            counted: HashMap::new(),
            first_index: 0,
            release_from: None,
        }
    }

    /// Releases the mapped bytes behind each chunk handed out ([`RankFile::release`]): for a
    /// caller that drops each chunk before it asks for the next, so that walking a large file
    /// does not keep it all resident. A sibling walk over the same file (another thread stream
    /// of the rank) reads what it needs again from the file.
    pub fn releasing(mut self) -> Self {
        self.release_from = Some(0);
        self
    }

    /// Every stream's chunks that `want` wants by their header (e.g. those whose time range
    /// meets a window). The others still count for the sequence checks and are verified up to
    /// their payload checksum, so gaps and damage are reported as by [`ChunkWalk::new`].
    pub fn wanting(files: &'a [RankFile], want: impl Fn(&ChunkHeader) -> bool + Send + 'a) -> Self {
        ChunkWalk {
            want: Some(Box::new(want)),
            ..ChunkWalk::new(files)
        }
    }

    /// Chunks passed over without decoding, so far.
    pub fn passed(&self) -> u64 {
        self.passed
    }

    /// The index in its stream of the first event of the chunk last handed out: events of the
    /// stream's earlier chunks, decoded or passed over (by their headers' `events`).
    pub fn first_index(&self) -> u64 {
        self.first_index
    }

    /// Only `stream`'s chunks; the others' are passed over by their header, not decoded.
    pub fn stream(files: &'a [RankFile], stream: u32) -> Self {
        ChunkWalk {
            stream: Some(stream),
            ..ChunkWalk::new(files)
        }
    }

    /// What was skipped so far, in the order met.
    pub fn issues(&self) -> &[WalkIssue] {
        &self.issues
    }

    pub fn into_issues(self) -> Vec<WalkIssue> {
        self.issues
    }

    fn issue(&mut self, file: &RankFile, offset: u64, what: String) {
        self.issues.push(WalkIssue {
            file: file.path().to_path_buf(),
            offset,
            what,
        });
    }

    /// Checks a chunk's place in its stream's sequence: false for a chunk already read (a second
    /// copy); a gap before it is reported.
    fn in_order(&mut self, file: &RankFile, offset: u64, header: &ChunkHeader) -> bool {
        let (stream, seq) = (header.stream, header.seq);
        let expected = self.next_seq.get(&stream).copied().unwrap_or(0);
        if seq < expected {
            if self.stream.is_none_or(|s| s == stream) {
                self.issue(
                    file,
                    offset,
                    format!(
                        "chunk {seq} of thread stream {stream} was already read (a second copy); \
                         read once"
                    ),
                );
            }
            return false;
        }
        if seq > expected && self.stream.is_none_or(|s| s == stream) {
            let missing = if seq == expected + 1 {
                format!("chunk {expected}")
            } else {
                format!("chunks {expected}..={}", seq - 1)
            };
            self.issue(
                file,
                offset,
                format!("{missing} of thread stream {stream} missing before this chunk"),
            );
        }
        self.next_seq.insert(stream, seq + 1);
        let counted = self.counted.entry(stream).or_default();
        self.first_index = *counted;
        *counted += header.events;
        true
    }
}

impl<'a> Iterator for ChunkWalk<'a> {
    type Item = Chunk<'a>;

    fn next(&mut self) -> Option<Chunk<'a>> {
        loop {
            if self.current.is_none() {
                if let (Some(from), Some(done)) = (
                    self.release_from,
                    self.next_file
                        .checked_sub(1)
                        .and_then(|i| self.files.get(i)),
                ) {
                    done.release(from..done.len());
                    self.release_from = Some(0);
                }
                let file = self.files.get(self.next_file)?;
                self.next_file += 1;
                self.current = Some((file.chunks(), file));
            }
            let (reader, file) = self.current.as_mut().expect("set above");
            let file: &RankFile = file;
            // A stream's walk passes over the other streams' chunks by their header: it needs
            // only their place in the sequence, and stops at the same damage (payload checksums
            // are verified whether decoded or not).
            let (want, stream) = (&self.want, self.stream);
            let next = reader.next_wanted(|h| {
                stream.is_none_or(|s| s == h.stream) && want.as_ref().is_none_or(|w| w(h))
            });
            match next {
                Some(Ok(Reached::Read(chunk))) => {
                    if self.in_order(file, chunk.offset, &chunk.header)
                        && self.stream.is_none_or(|s| s == chunk.stream())
                    {
                        let mut chunk = *chunk;
                        if let Some(from) = self.release_from {
                            file.release(from..chunk.offset);
                            self.release_from = Some(chunk.offset);
                            chunk.release_as_read(file);
                        }
                        return Some(chunk);
                    }
                }
                Some(Ok(Reached::Passed { offset, header })) => {
                    if self.in_order(file, offset, &header) {
                        self.passed += 1;
                    }
                }
                // The reader stopped; its tail says why (the error repeats it).
                Some(Err(_)) => {}
                None => {
                    let Some(tail) = reader.tail().cloned() else {
                        self.current = None;
                        continue;
                    };
                    let resumed = reader.resync();
                    if self.stream.is_none() {
                        let what = match (tail.kind, resumed) {
                            (TailKind::Damaged, Some(at)) => format!(
                                "{}; bytes {}..{at} skipped, reading resumed at the next intact chunk",
                                tail.reason, tail.offset
                            ),
                            (TailKind::Damaged, None) => format!(
                                "{}; the rest of this rank's share of the file ({} on) was not read",
                                tail.reason, tail.offset
                            ),
                            (_, _) => {
                                format!("{} (every complete chunk before it was read)", tail.reason)
                            }
                        };
                        self.issue(file, tail.offset, what);
                    }
                    if resumed.is_none() {
                        self.current = None;
                    }
                }
            }
        }
    }
}
