//! What one memory sample costs the rank that takes it (issue target: at most 1 µs per
//! suspension, nothing on the per-call path). Run: `cargo bench -p recorder --bench memory_sample`.
//!
//! - `rss`: what every rank reads at every sample (`/proc/self/statm`);
//! - `node`: what one rank per node adds (`/proc/meminfo`, the memory cgroup's files);
//! - `node+swap`: the same with `/proc/vmstat` (the node's first rank, at samples only);
//! - `sample`: the whole sample as a rank's own thread takes it (the node's figures come from the
//!   watcher thread, which does `node+swap` or `node` off the program's path).

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use format::MemoryWhen;
use recorder::back::memory::{self, Sampler};
use recorder::back::node::NodePlace;

fn sampling(c: &mut Criterion) {
    let mut group = c.benchmark_group("memory");
    group.measurement_time(Duration::from_secs(3));
    let mut s = Sampler::open();
    group.bench_function("rss", |b| b.iter(|| black_box(s.rss_bytes())));
    group.bench_function("node", |b| b.iter(|| black_box(s.node(false))));
    group.bench_function("node+swap", |b| b.iter(|| black_box(s.node(true))));
    memory::init(
        NodePlace {
            local_rank: 0,
            local_size: 2,
            known: true,
        },
        false,
        1e9,
        || {},
    );
    let mut t = 0u64;
    group.bench_function("sample", |b| {
        b.iter(|| {
            t += 1;
            black_box(memory::sample(t, MemoryWhen::Suspension, 0, 0))
        })
    });
    group.finish();
}

criterion_group!(benches, sampling);
criterion_main!(benches);
