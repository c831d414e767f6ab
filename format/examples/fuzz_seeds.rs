//! Writes the seed corpus of the `chunk_reader` fuzz target (`format::fuzzing::seed_corpus`):
//! valid chunks of every version, rank and group files, and malformed inputs whose checksums are
//! valid. `format/tests/fuzz_corpus.rs` checks that the committed corpus is this one.
//! `cargo run -p format --example fuzz_seeds -- fuzz/corpus/chunk_reader`

fn main() {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "fuzz/corpus/chunk_reader".to_owned());
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the corpus directory");
    for (name, bytes) in format::fuzzing::seed_corpus() {
        std::fs::write(format!("{dir}/{name}"), bytes).expect("write a seed");
    }
}
