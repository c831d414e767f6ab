//! Writes seed inputs for the `chunk_reader` fuzz target: valid chunk sequences (with and without
//! compression) covering every event kind, so the fuzzer starts past the checksums.
//! `cargo run -p format --example fuzz_seeds -- fuzz/corpus/chunk_reader`

use format::synthetic::{self, HaloConfig};
use format::*;

fn main() {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "fuzz/corpus/chunk_reader".to_owned());
    std::fs::create_dir_all(&dir).expect("create the corpus directory");
    let mut events = synthetic::events(&HaloConfig {
        iterations: 3,
        ..HaloConfig::default()
    });
    events.push(Event::User(UserRecord {
        time: 1,
        name: 2,
        payload: b"payload".to_vec(),
    }));
    events.push(Event::Region(Region {
        time: 2,
        name: 3,
        begin: true,
    }));
    events.push(Event::Suspension(Suspension {
        seq: 1,
        start: 5,
        end: 9,
        z_ns: 4,
        ..Suspension::default()
    }));
    events.push(Event::Clock(ClockSample {
        local: 7,
        offset_ns: -3.5,
        rtt_ns: 900.0,
        when: SampleKind::Suspension,
    }));
    events.push(Event::StringDef {
        id: 2,
        text: "solver".to_owned(),
    });
    events.push(Event::Marker(Marker::Stuck {
        time: 11,
        func: 42,
        elapsed_ns: 1_000_000,
        comm: 0,
        peer: 1,
        tag: 7,
    }));
    events.push(Event::Completion(Completion {
        request: 3,
        cancelled: true,
        ..Completion::default()
    }));
    let mut raw = RawBuf::new();
    for e in &events {
        raw.push_event(e);
    }
    for (name, mut encoder) in [
        ("zstd", ChunkEncoder::new(3)),
        ("stored", ChunkEncoder::uncompressed()),
    ] {
        let mut bytes = encoder.encode(1, 0, 0, &raw).bytes;
        bytes.extend(encoder.encode(1, 1, 0, &RawBuf::new()).bytes);
        std::fs::write(format!("{dir}/{name}.bin"), bytes).expect("write a seed");
    }
}
