//! Compares candidate chunk payload encodings on the synthetic halo-exchange stream. The numbers
//! in FORMAT.md's "Design choices" come from this program:
//! `cargo run --release -p format --example compare_encodings`.

use format::synthetic::{self, HaloConfig};
use format::{ChunkEncoder, Event, RawBuf};

fn put_u64(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zz(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Raw records laid end to end (what the RawBuf holds).
fn raw_concat(buf: &RawBuf) -> Vec<u8> {
    buf.blocks().flat_map(|b| b.iter().copied()).collect()
}

/// Row-oriented: each event's fields one after the other, with the same delta/varint transforms
/// as the columnar layout.
fn rows(buf: &RawBuf, delta: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let mut prev_end = 0u64;
    for e in buf.iter() {
        match e {
            Event::Call(c) => {
                out.push(1);
                put_u64(&mut out, c.func as u64);
                if delta {
                    put_u64(&mut out, zz(c.start.wrapping_sub(prev_end) as i64));
                    put_u64(&mut out, zz(c.end.wrapping_sub(c.start) as i64));
                } else {
                    put_u64(&mut out, c.start);
                    put_u64(&mut out, c.end);
                }
                prev_end = c.end;
                put_u64(&mut out, c.comm as u64);
                put_u64(&mut out, zz(c.peer as i64));
                put_u64(&mut out, zz(c.tag as i64));
                put_u64(&mut out, c.bytes);
                put_u64(&mut out, zz(c.root as i64));
                put_u64(&mut out, c.request);
                put_u64(&mut out, c.cost as u64);
            }
            Event::Completion(c) => {
                out.push(2);
                put_u64(&mut out, c.request);
                put_u64(&mut out, zz(c.source as i64));
                put_u64(&mut out, zz(c.tag as i64));
                put_u64(&mut out, c.bytes);
            }
            _ => out.push(9),
        }
    }
    out
}

/// Columnar with fixed-width little-endian fields, time columns split into byte planes (all
/// low bytes, then all second bytes, ...), the "shuffle" trick of Blosc-like codecs.
fn byte_planes(buf: &RawBuf) -> Vec<u8> {
    let mut starts = Vec::new();
    let mut durs = Vec::new();
    let mut costs = Vec::new();
    let mut rest = Vec::new();
    let mut prev_end = 0u64;
    for e in buf.iter() {
        match e {
            Event::Call(c) => {
                starts.push(c.start.wrapping_sub(prev_end) as u32);
                durs.push(c.end.wrapping_sub(c.start) as u32);
                costs.push(c.cost as u16);
                prev_end = c.end;
                rest.push(1u8);
                rest.extend_from_slice(&c.func.to_le_bytes());
                rest.extend_from_slice(&c.peer.to_le_bytes());
                rest.extend_from_slice(&c.tag.to_le_bytes());
                rest.extend_from_slice(&(c.bytes as u32).to_le_bytes());
                rest.extend_from_slice(&c.request.to_le_bytes());
            }
            Event::Completion(c) => {
                rest.push(2);
                rest.extend_from_slice(&c.request.to_le_bytes());
                rest.extend_from_slice(&c.source.to_le_bytes());
                rest.extend_from_slice(&(c.bytes as u32).to_le_bytes());
            }
            _ => rest.push(9),
        }
    }
    let mut out = Vec::new();
    for plane in 0..4 {
        out.extend(starts.iter().map(|v| (v >> (8 * plane)) as u8));
    }
    for plane in 0..4 {
        out.extend(durs.iter().map(|v| (v >> (8 * plane)) as u8));
    }
    for plane in 0..2 {
        out.extend(costs.iter().map(|v| (v >> (8 * plane)) as u8));
    }
    out.extend_from_slice(&rest);
    out
}

/// Every field as its own column of u64 (after the delta/zigzag transforms), for layout trials.
fn value_columns(buf: &RawBuf) -> Vec<Vec<u64>> {
    let mut cols = vec![Vec::new(); 15];
    let mut prev_end = 0u64;
    for e in buf.iter() {
        match e {
            Event::Call(c) => {
                cols[0].push(1);
                cols[1].push(c.func as u64);
                cols[2].push(zz(c.start.wrapping_sub(prev_end) as i64));
                cols[3].push(zz(c.end.wrapping_sub(c.start) as i64));
                prev_end = c.end;
                cols[4].push(c.comm as u64);
                cols[5].push(zz(c.peer as i64));
                cols[6].push(zz(c.tag as i64));
                cols[7].push(c.bytes);
                cols[8].push(zz(c.root as i64));
                cols[9].push(c.request);
                cols[10].push(c.cost as u64);
            }
            Event::Completion(c) => {
                cols[0].push(2);
                cols[11].push(c.request);
                cols[12].push(zz(c.source as i64));
                cols[13].push(zz(c.tag as i64));
                cols[14].push(c.bytes);
            }
            _ => cols[0].push(9),
        }
    }
    cols
}

/// Byte planes at the narrowest width that holds every value of the column.
fn planes_of(col: &[u64], out: &mut Vec<u8>) {
    let max = col.iter().copied().max().unwrap_or(0);
    let width = (8 - max.leading_zeros() as usize / 8).max(1);
    out.push(width as u8);
    for plane in 0..width {
        out.extend(col.iter().map(|v| (v >> (8 * plane)) as u8));
    }
}

fn hybrid(buf: &RawBuf, planes_for: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, col) in value_columns(buf).iter().enumerate() {
        if planes_for.contains(&i) {
            planes_of(col, &mut out);
        } else {
            for &v in col {
                put_u64(&mut out, v);
            }
        }
    }
    out
}

/// CPU time of this thread in seconds: on a shared machine, wall time also counts the time other
/// processes held the core; CPU time is what one core spends on the work.
fn thread_cpu_secs() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to; the clock id is a constant the kernel knows.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn main() {
    let iterations: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let cfg = HaloConfig {
        iterations,
        ..HaloConfig::default()
    };
    let buf = synthetic::raw_buf(&cfg);
    let calls = buf.iter().filter(|e| matches!(e, Event::Call(_))).count() as f64;
    let events = buf.events() as f64;
    let raw_bytes = buf.bytes() as f64;
    println!(
        "synthetic stream: {} events ({calls} calls), {} raw bytes ({:.1} B/call incl. completions)",
        events,
        raw_bytes,
        raw_bytes / calls
    );
    println!(
        "{:<44} {:>10} {:>10} {:>10} {:>12}",
        "encoding", "pre-zstd", "stored", "B/call", "MB/s raw"
    );
    let report = |name: &str, pre: &[u8], level: i32| {
        let t = thread_cpu_secs();
        let mut stored = 0;
        let reps = 3;
        for _ in 0..reps {
            stored = zstd::bulk::compress(pre, level).unwrap().len();
        }
        let secs = (thread_cpu_secs() - t) / reps as f64;
        println!(
            "{:<44} {:>10} {:>10} {:>10.2} {:>12.0}",
            format!("{name}, zstd {level} (zstd time only)"),
            pre.len(),
            stored,
            stored as f64 / calls,
            raw_bytes / secs / 1e6
        );
    };
    let raw = raw_concat(&buf);
    for level in [1, 3] {
        report("raw fixed records", &raw, level);
    }
    let rows_abs = rows(&buf, false);
    let rows_delta = rows(&buf, true);
    report("rows, varint, absolute times", &rows_abs, 3);
    report("rows, varint, delta times", &rows_delta, 3);
    let planes = byte_planes(&buf);
    report("columns, fixed width, byte planes", &planes, 3);
    report(
        "columns, varint, times as byte planes",
        &hybrid(&buf, &[2, 3, 10]),
        1,
    );
    report(
        "columns, varint, times as byte planes",
        &hybrid(&buf, &[2, 3, 10]),
        3,
    );
    report(
        "columns, all byte planes (chosen)",
        &hybrid(&buf, &(0..15).collect::<Vec<_>>()),
        3,
    );
    report("columns, varint everywhere", &hybrid(&buf, &[]), 3);
    // Decoding: verify, decompress, validate and iterate every event of the level-3 chunk.
    let chunk = ChunkEncoder::new(3).encode(0, 0, 0, &buf);
    let t = thread_cpu_secs();
    let mut n = 0usize;
    for _ in 0..3 {
        for c in format::ChunkReader::new(&chunk.bytes, 0, std::path::Path::new("mem")) {
            n += c.expect("valid chunk").events().count();
        }
    }
    let secs = (thread_cpu_secs() - t) / 3.0;
    assert_eq!(n as u64, 3 * buf.events());
    println!(
        "decode+verify+iterate of the zstd 3 chunk: {:.0} MB/s raw CPU",
        raw_bytes / secs / 1e6
    );
    // The append itself, per call, in CPU time, within one block kept by `clear` (steady state).
    let mut one = RawBuf::new();
    let calls_only: Vec<format::MpiCall> = buf
        .iter()
        .filter_map(|e| {
            if let Event::Call(c) = e {
                Some(c)
            } else {
                None
            }
        })
        .take(15_000)
        .collect();
    let t = thread_cpu_secs();
    let rounds = 200;
    for _ in 0..rounds {
        one.clear();
        for c in &calls_only {
            one.push_call(std::hint::black_box(c));
        }
    }
    let ns = (thread_cpu_secs() - t) / (rounds * calls_only.len()) as f64 * 1e9;
    println!("RawBuf::push_call: {ns:.1} ns CPU per call");
    for level in [None, Some(-1), Some(1), Some(3), Some(6), Some(9), Some(19)] {
        let mut enc = level.map_or_else(ChunkEncoder::uncompressed, ChunkEncoder::new);
        let mut chunk = enc.encode(0, 0, 0, &buf);
        let t = thread_cpu_secs();
        let reps = 5;
        for _ in 0..reps {
            chunk = enc.encode(0, 0, 0, &buf);
        }
        let secs = (thread_cpu_secs() - t) / reps as f64;
        println!(
            "{:<44} {:>10} {:>10} {:>10.2} {:>12.0}",
            match level {
                Some(level) => format!("ChunkEncoder (planes, chosen), zstd {level}"),
                None => "ChunkEncoder (planes, chosen), uncompressed".to_owned(),
            },
            chunk.raw_len,
            chunk.stored_len,
            chunk.stored_len as f64 / calls,
            raw_bytes / secs / 1e6
        );
    }
}
