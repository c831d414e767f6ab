//! Encode+compress throughput of the trace format on a synthetic halo-exchange stream, and the
//! stored bytes per MPI call it achieves. Run: `cargo bench --bench format_encode`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use format::chunk::DEFAULT_LEVEL;
use format::synthetic::{self, HaloConfig};
use format::{ChunkEncoder, Event, EventBuf, MpiCall, RankFile, RankFileWriter, RawBuf};

fn stream() -> (RawBuf, usize) {
    // ~15 MB of raw records: the size of a modest flush threshold S.
    let cfg = HaloConfig {
        iterations: 20_000,
        ..HaloConfig::default()
    };
    let buf = synthetic::raw_buf(&cfg);
    let calls = buf.iter().filter(|e| matches!(e, Event::Call(_))).count();
    (buf, calls)
}

fn encode(c: &mut Criterion) {
    let (buf, calls) = stream();
    let mut group = c.benchmark_group("encode");
    group.throughput(Throughput::Bytes(buf.bytes() as u64));
    for level in [1, 3, 6] {
        let mut enc = ChunkEncoder::new(level);
        let chunk = enc.encode(0, 0, 0, &buf);
        eprintln!(
            "zstd level {level}: {} raw bytes ({:.1} B/call incl. completions) -> {} stored: {:.2} B per MPI call, \
             {:.2} B per event, ratio {:.1}",
            buf.bytes(),
            buf.bytes() as f64 / calls as f64,
            chunk.bytes.len(),
            chunk.bytes.len() as f64 / calls as f64,
            chunk.bytes.len() as f64 / buf.events() as f64,
            buf.bytes() as f64 / chunk.bytes.len() as f64
        );
        group.bench_function(format!("zstd{level}"), |b| {
            b.iter(|| black_box(enc.encode(0, 0, 0, black_box(&buf))))
        });
    }
    group.finish();
}

/// What reconstruction writes: decoded events, in chunks of its output's size (65 536 events), at
/// its output's zstd level (1).
fn encode_events(c: &mut Criterion) {
    let (raw, _) = stream();
    let mut events = EventBuf::new();
    for e in raw.iter().take(1 << 16) {
        events.push(&e);
    }
    let mut group = c.benchmark_group("encode_events");
    group.throughput(Throughput::Elements(events.len() as u64));
    // The columns alone, then with the compression.
    for (name, mut enc) in [
        ("uncompressed", ChunkEncoder::uncompressed()),
        ("zstd1", ChunkEncoder::new(1)),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| black_box(enc.encode_events(0, 0, 0, black_box(&events))))
        });
    }
    group.finish();
}

fn decode(c: &mut Criterion) {
    let (buf, _) = stream();
    let chunk = ChunkEncoder::new(DEFAULT_LEVEL).encode(0, 0, 0, &buf);
    let header = format::FileHeader {
        rank: 0,
        world_size: 1,
        part: 0,
        clock: format::ClockCalibration::default(),
        created_unix_ns: 0,
        producer: "bench".into(),
    };
    let mut w = RankFileWriter::new(Vec::new(), &header).unwrap();
    w.write_chunk(&chunk).unwrap();
    let file = RankFile::from_bytes(w.into_inner(), "bench.evf").unwrap();
    let mut group = c.benchmark_group("decode");
    group.throughput(Throughput::Bytes(buf.bytes() as u64));
    group.bench_function("read+verify+iterate", |b| {
        b.iter(|| {
            file.events()
                .map(|e| black_box(e.is_ok()) as u64)
                .sum::<u64>()
        })
    });
    group.finish();
}

fn push(c: &mut Criterion) {
    let mut group = c.benchmark_group("rawbuf");
    let call = MpiCall {
        func: 42,
        start: 1_000,
        end: 1_500,
        peer: 3,
        tag: 7,
        bytes: 4096,
        request: 99,
        ..Default::default()
    };
    // Within one kept block (steady state after the first flush), and across fresh blocks
    // (includes allocating and first-touch page faults of new memory).
    for (name, n) in [
        ("push_call/in_block", 15_000u64),
        ("push_call/growing", 200_000),
    ] {
        let mut buf = RawBuf::new();
        group.throughput(Throughput::Elements(n));
        group.bench_function(name, |b| {
            b.iter(|| {
                buf.clear();
                for i in 0..n {
                    buf.push_call(black_box(&MpiCall { start: i, ..call }));
                }
                black_box(buf.bytes())
            })
        });
    }
    // The loop above without the append: what the harness itself costs per element.
    let n = 15_000u64;
    group.throughput(Throughput::Elements(n));
    group.bench_function("loop_baseline", |b| {
        b.iter(|| {
            let mut acc = 0u64;
            for i in 0..n {
                acc = acc.wrapping_add(black_box(&MpiCall { start: i, ..call }).end);
            }
            black_box(acc)
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1)).sample_size(10);
    targets = encode, encode_events, decode, push
}
criterion_main!(benches);
