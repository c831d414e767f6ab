//! Feeds arbitrary bytes to the chunk reader (as the chunk area of a file), the rank-file reader
//! and the group-file scanner. None may panic or allocate without bound; and whatever a chunk
//! decodes to must survive a re-encode unchanged. The body is `format::fuzzing::check`, which
//! ordinary tests also run over the seed corpus (`format/tests/fuzz_corpus.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    format::fuzzing::check(data);
});
