//! The `chunk_reader` fuzz target's body ([`format::fuzzing::check`]) as ordinary tests, over the
//! committed seed corpus `fuzz/corpus/chunk_reader`: the valid seeds (a chunk of every version,
//! rank and group files) must read in full, the malformed ones (all checksums valid) must be
//! refused, and no seed may make the body panic. `fuzz_for_a_while` (ignored by default; run by
//! `scripts/test.sh`) is a bounded fuzzing run on the stable toolchain: random mutations of the
//! corpus for `EVENFLUSH_FUZZ_SECONDS` (default 20) seconds.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use format::framing::{CHUNK_HEADER_LEN, CHUNK_VERSION, ChunkHeader};
use format::fuzzing::{check, mutate, read_in_full, seed_corpus};
use format::synthetic::Rng;

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/chunk_reader")
}

/// The committed corpus, by file name.
fn committed() -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(corpus_dir())
        .expect("fuzz/corpus/chunk_reader is committed")
        .map(|e| e.unwrap().path())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect()
}

/// The corpus is what `format::fuzzing::seed_corpus` makes (regenerate it with
/// `cargo run -p format --example fuzz_seeds`), so it follows the format's changes.
#[test]
fn committed_corpus_is_the_generated_one() {
    let want: BTreeMap<String, Vec<u8>> = seed_corpus().into_iter().collect();
    let got = committed();
    let names = |m: &BTreeMap<String, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        names(&got),
        names(&want),
        "run `cargo run -p format --example fuzz_seeds`"
    );
    for (name, bytes) in &want {
        assert!(
            &got[name] == bytes,
            "{name} differs from the generated seed: run `cargo run -p format --example fuzz_seeds`"
        );
    }
}

#[test]
fn valid_seeds_read_in_full_and_cover_every_version() {
    let mut versions = Vec::new();
    for (name, bytes) in committed().iter().filter(|(n, _)| n.starts_with("valid-")) {
        let events = read_in_full(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(events > 0, "{name}: no events");
        if name.starts_with("valid-chunk-v") {
            let h = ChunkHeader::from_bytes(bytes[..CHUNK_HEADER_LEN].try_into().unwrap());
            versions.push(h.version);
        }
    }
    versions.sort();
    assert_eq!(versions, (1..=CHUNK_VERSION).collect::<Vec<_>>());
}

#[test]
fn malformed_seeds_with_valid_checksums_are_refused() {
    let malformed: Vec<_> = committed()
        .into_iter()
        .filter(|(n, _)| n.starts_with("malformed-"))
        .collect();
    assert!(malformed.len() >= 10, "{}", malformed.len());
    for (name, bytes) in malformed {
        assert!(
            read_in_full(&bytes).is_err(),
            "{name}: read without complaint"
        );
    }
}

#[test]
fn fuzz_body_over_the_corpus() {
    for (name, bytes) in committed() {
        let result = std::panic::catch_unwind(|| check(&bytes));
        let decoded = result.unwrap_or_else(|_| panic!("{name}: the fuzz body panicked"));
        if name.starts_with("valid-") {
            assert!(decoded >= 2, "{name}: the body decoded {decoded} chunks");
        }
    }
}

/// A bounded fuzzing run without libFuzzer (which needs nightly): random mutations of the corpus
/// fed to the body for `EVENFLUSH_FUZZ_SECONDS`; a failing input is saved under `target/` and named.
#[test]
#[ignore = "a fuzzing run of ~20 s: scripts/test.sh runs it"]
fn fuzz_for_a_while() {
    let secs: u64 = std::env::var("EVENFLUSH_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let seed: u64 = std::env::var("EVENFLUSH_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    let corpus: Vec<Vec<u8>> = committed().into_values().collect();
    let mut rng = Rng::new(seed);
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut runs = 0u64;
    let mut decoding = 0u64;
    // Mutants that still had a chunk decoded become further inputs, so mutations stack up
    // where they reach the decoders (a crude stand-in for coverage feedback).
    let mut pool: Vec<Vec<u8>> = Vec::new();
    while Instant::now() < deadline {
        let base = if pool.is_empty() || rng.next_u64().is_multiple_of(2) {
            &corpus[rng.next_u64() as usize % corpus.len()]
        } else {
            &pool[rng.next_u64() as usize % pool.len()]
        };
        let other = &corpus[rng.next_u64() as usize % corpus.len()];
        let input = mutate(base, other, &mut rng);
        let result = std::panic::catch_unwind(|| check(&input));
        let decoded = result.as_ref().is_ok_and(|&n| n > 0);
        if result.is_err() {
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/fuzz-failures");
            std::fs::create_dir_all(&dir).unwrap();
            let file = dir.join(format!("crash-{seed}-{runs}.bin"));
            std::fs::write(&file, &input).unwrap();
            panic!(
                "the fuzz body panicked on {} (EVENFLUSH_FUZZ_SEED={seed}, run {runs})",
                file.display()
            );
        }
        if decoded {
            decoding += 1;
            if pool.len() < 4096 {
                pool.push(input);
            } else {
                let at = rng.next_u64() as usize % pool.len();
                pool[at] = input;
            }
        }
        runs += 1;
    }
    eprintln!(
        "fuzzed {runs} inputs in {secs} s, {decoding} with a chunk the readers decoded \
         (EVENFLUSH_FUZZ_SEED={seed})"
    );
    assert!(runs > 1000, "only {runs} inputs in {secs} s");
    // Mutants must reach the decoders, not only the checks in front of them.
    assert!(
        decoding * 100 > runs,
        "only {decoding} of {runs} inputs had a chunk decoded"
    );
}
