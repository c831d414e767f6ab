//! What `--callsites` adds to storing a call (issue target: keep it off by default above 5 ns per
//! event). Run: `cargo bench -p recorder --bench callsite`.
//!
//! - `push_call`: a cheap call's record appended to a buffer, as without call sites;
//! - `push_call+site`: the same call with its site looked up in the thread's cache (a hit, as in
//!   any loop) and stored as one more varint.
//!
//! The wrapper's part, `__builtin_return_address(0)` behind a flag test, is a load from the stack
//! frame and is not measured here.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use format::{MpiCall, RawBuf};
use recorder::front::callsites::{self, CACHE_SLOTS};

fn storing(c: &mut Criterion) {
    let mut group = c.benchmark_group("record");
    group.measurement_time(Duration::from_secs(3));
    let call = MpiCall {
        func: 12,
        comm: 0,
        cost: 40,
        ..MpiCall::default()
    };
    // Buffers are dropped and refilled so that their growth stays in both figures alike.
    let mut t = 0u64;
    let mut buf = RawBuf::new();
    group.bench_function("push_call", |b| {
        b.iter(|| {
            t += 100;
            if buf.bytes() > 64 << 20 {
                buf = RawBuf::new();
            }
            buf.push_call(black_box(&MpiCall {
                start: t,
                end: t + 50,
                ..call
            }));
        })
    });
    let mut sites = [(0u64, 0u32); CACHE_SLOTS];
    let mut buf = RawBuf::new();
    let address = black_box(0x5555_5555_a1b2u64);
    group.bench_function("push_call+site", |b| {
        b.iter(|| {
            t += 100;
            if buf.bytes() > 64 << 20 {
                buf = RawBuf::new();
            }
            let site = callsites::site_of(&mut sites, &mut buf, black_box(address));
            buf.push_call(black_box(&MpiCall {
                start: t,
                end: t + 50,
                site,
                ..call
            }));
        })
    });
    group.finish();
}

criterion_group!(benches, storing);
criterion_main!(benches);
