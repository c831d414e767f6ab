//! The matched messages kept beside the trace, for the windowed views: which send a receive in a
//! window pairs with depends on every earlier message of its channel, so without this a window
//! would make the happened-before pass over every lane from its start ([`for_each_global_match`]).
//!
//! One full matching pass on a windowed view's first use writes every [`MessageMatch`] (times on
//! the global axis in absolute ns, as the exports and [`Window`] use them) into
//! `.evenflush-meta/matches.bin`, sorted by the earlier of its two ends, with a stamp of the trace's
//! source files beside it (`matches.json`; the rule and the stamp are `trace::meta_cache`'s: a
//! stamp that does not match the files now, a file of another length or version is rebuilt, never
//! used). A window then reads the records whose earlier end lies in `[from - longest, to]`, where
//! `longest` is the longest message (send start to receive end) of the run, found by binary search
//! on the fixed-size records. Where `.evenflush-meta/` cannot be written, every use makes the full
//! pass. Layout: FORMAT.md "Kept indexes".

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use trace::definitions::RankMeta;
use trace::meta_cache::{Source, cache_dir, trace_sources, write_whole};
use trace::window::Window;
use trace::{Trace, TraceError};

use crate::hb::{EventRef, MessageMatch};
use crate::matches::{crosses, for_each_global_match};

/// Changes whenever the records' layout or meaning changes: older indexes are rebuilt.
const VERSION: u32 = 1;
const MAGIC: &[u8; 8] = b"EFMATCH\x01";
/// Bytes of one record (FORMAT.md "Kept indexes").
pub const RECORD: usize = 84;

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Stamp {
    version: u32,
    sources: Vec<Source>,
    messages: u64,
    /// The longest message, `recv_end - send_start` or the reverse, in ns.
    longest: u64,
    /// Length of `matches.bin`.
    len: u64,
}

fn paths(trace: &Trace) -> (PathBuf, PathBuf) {
    let dir = cache_dir(trace);
    (dir.join("matches.bin"), dir.join("matches.json"))
}

/// The earlier end: the records' sort key.
fn lo(m: &MessageMatch) -> u64 {
    m.send_start.min(m.recv_end)
}

fn encode(m: &MessageMatch, out: &mut Vec<u8>) {
    for r in [m.send, m.recv_post, m.recv_done] {
        out.extend_from_slice(&r.rank.to_le_bytes());
        out.extend_from_slice(&r.stream.to_le_bytes());
        out.extend_from_slice(&r.index.to_le_bytes());
    }
    out.extend_from_slice(&m.source.to_le_bytes());
    out.extend_from_slice(&m.dest.to_le_bytes());
    out.extend_from_slice(&m.tag.to_le_bytes());
    out.extend_from_slice(&m.bytes.to_le_bytes());
    out.extend_from_slice(&m.send_start.to_le_bytes());
    out.extend_from_slice(&m.recv_end.to_le_bytes());
}

fn decode(b: &[u8]) -> MessageMatch {
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let r = |o: usize| EventRef {
        rank: u32_at(o),
        stream: u32_at(o + 4),
        index: u64_at(o + 8),
    };
    MessageMatch {
        send: r(0),
        recv_post: r(16),
        recv_done: r(32),
        source: u32_at(48),
        dest: u32_at(52),
        tag: u32_at(56) as i32,
        bytes: u64_at(60),
        send_start: u64_at(68),
        recv_end: u64_at(76),
    }
}

/// What a windowed use of the index read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexRead {
    /// Whether the index was made by this use (a full matching pass), or not kept at all.
    pub built: bool,
    /// Records read from the kept file (all of them when it was built or could not be kept).
    pub records_read: u64,
    /// Matched messages of the whole run.
    pub messages: u64,
}

/// Every matched message with an end inside `window`'s time (`Window::contains` of its send start
/// or its receive end), in the order of its earlier end, from the kept index: made by one full
/// matching pass when missing or stale. `metas` are the trace's first-pass metadata.
pub fn for_each_match_meeting(
    trace: &Trace,
    metas: &[RankMeta],
    window: &Window,
    mut f: impl FnMut(&MessageMatch),
) -> Result<IndexRead, TraceError> {
    let sources = trace_sources(trace)?;
    let (bin, json) = paths(trace);
    if let Some((file, stamp)) = open_kept(&bin, &json, &sources) {
        let records_read = read_window(&file, &stamp, window, &bin, &mut f)?;
        return Ok(IndexRead {
            built: false,
            records_read,
            messages: stamp.messages,
        });
    }
    let all = match_all(trace, metas)?;
    let longest = all
        .iter()
        .map(|m| m.send_start.abs_diff(m.recv_end))
        .max()
        .unwrap_or(0);
    // An index that cannot be written costs the next windowed use a full matching pass, nothing
    // else: the messages handed out come from that pass either way.
    let _ = write_kept(&bin, &json, &all, longest, sources);
    for m in all.iter().filter(|m| meets(window, m)) {
        f(m);
    }
    Ok(IndexRead {
        built: true,
        records_read: all.len() as u64,
        messages: all.len() as u64,
    })
}

/// Whether one of `m`'s ends lies in the window's time (ranks are the caller's to judge).
fn meets(window: &Window, m: &MessageMatch) -> bool {
    window.contains(m.send_start) || window.contains(m.recv_end)
}

/// How many matched messages cross `window`'s edge (one end in it, the other not, in time or
/// rank), from the kept index: what [`crate::matches::crossing_messages`] counts with a full pass.
pub fn crossing_messages_kept(
    trace: &Trace,
    metas: &[RankMeta],
    window: &Window,
) -> Result<u64, TraceError> {
    let mut crossing = 0u64;
    // A message whose both ends lie outside the window's time has neither end in it, whatever
    // the ranks: only those meeting it can cross.
    for_each_match_meeting(trace, metas, window, |m| {
        crossing += u64::from(crosses(window, m))
    })?;
    Ok(crossing)
}

/// Every matched message of the run, sorted by its earlier end (then by its send, so the order
/// does not depend on the matcher's schedule).
fn match_all(trace: &Trace, metas: &[RankMeta]) -> Result<Vec<MessageMatch>, TraceError> {
    let mut all = Vec::new();
    for_each_global_match(trace, metas, |m| all.push(*m))?;
    all.sort_by_key(|m| (lo(m), m.send.rank, m.send.stream, m.send.index));
    Ok(all)
}

fn open_kept(bin: &Path, json: &Path, sources: &[Source]) -> Option<(File, Stamp)> {
    let stamp: Stamp = serde_json::from_slice(&std::fs::read(json).ok()?).ok()?;
    if stamp.version != VERSION || stamp.sources != sources {
        return None;
    }
    let file = File::open(bin).ok()?;
    let len = file.metadata().ok()?.len();
    if len != stamp.len || len != MAGIC.len() as u64 + stamp.messages * RECORD as u64 {
        return None;
    }
    let mut magic = [0u8; 8];
    file.read_exact_at(&mut magic, 0).ok()?;
    (&magic == MAGIC).then_some((file, stamp))
}

fn write_kept(
    bin: &Path,
    json: &Path,
    all: &[MessageMatch],
    longest: u64,
    sources: Vec<Source>,
) -> std::io::Result<()> {
    std::fs::create_dir_all(bin.parent().expect("the index lies in a directory"))?;
    let mut bytes = Vec::with_capacity(MAGIC.len() + all.len() * RECORD);
    bytes.extend_from_slice(MAGIC);
    for m in all {
        encode(m, &mut bytes);
    }
    // The records first: a stamp never describes a file that is not whole.
    write_whole(bin, &bytes)?;
    let stamp = Stamp {
        version: VERSION,
        sources,
        messages: all.len() as u64,
        longest,
        len: bytes.len() as u64,
    };
    write_whole(json, &serde_json::to_vec(&stamp)?)
}

/// Hands out the records meeting `window`; returns how many were read.
fn read_window(
    file: &File,
    stamp: &Stamp,
    window: &Window,
    path: &Path,
    f: &mut impl FnMut(&MessageMatch),
) -> Result<u64, TraceError> {
    let io = |e: std::io::Error| TraceError::Io {
        path: path.to_path_buf(),
        what: e.to_string(),
    };
    let at = |i: u64| MAGIC.len() as u64 + i * RECORD as u64;
    let mut rec = [0u8; RECORD];
    let mut key = |i: u64| -> Result<u64, TraceError> {
        file.read_exact_at(&mut rec, at(i)).map_err(io)?;
        Ok(lo(&decode(&rec)))
    };
    // First record whose earlier end is at least `from - longest`: no message before it reaches
    // the window.
    let start = window.from.saturating_sub(stamp.longest);
    let (mut a, mut b) = (0u64, stamp.messages);
    while a < b {
        let mid = a + (b - a) / 2;
        if key(mid)? < start {
            a = mid + 1;
        } else {
            b = mid;
        }
    }
    let mut read = 0u64;
    let mut buf = vec![0u8; RECORD * 4096];
    let mut i = a;
    'outer: while i < stamp.messages {
        let n = (stamp.messages - i).min(4096);
        let part = &mut buf[..n as usize * RECORD];
        file.read_exact_at(part, at(i)).map_err(io)?;
        for r in part.chunks_exact(RECORD) {
            let m = decode(r);
            read += 1;
            if lo(&m) > window.to {
                break 'outer;
            }
            if meets(window, &m) {
                f(&m);
            }
        }
        i += n;
    }
    Ok(read)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_as_written() {
        let m = MessageMatch {
            send: EventRef {
                rank: 1,
                stream: 2,
                index: 3,
            },
            recv_post: EventRef {
                rank: 4,
                stream: 5,
                index: u64::MAX,
            },
            recv_done: EventRef {
                rank: 7,
                stream: 8,
                index: 9,
            },
            source: 1,
            dest: 4,
            tag: -1,
            bytes: 1 << 40,
            send_start: 123,
            recv_end: 99,
        };
        let mut b = Vec::new();
        encode(&m, &mut b);
        assert_eq!(b.len(), RECORD);
        assert_eq!(decode(&b), m);
        assert_eq!(lo(&m), 99);
    }
}
