//! Checks on the generated function table.

use crate::functions;

#[test]
fn functions_md_is_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/FUNCTIONS.md");
    if std::env::var_os("EVENFLUSH_BLESS").is_some() {
        std::fs::write(path, functions::FUNCTIONS_MD).unwrap();
    }
    let on_disk = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        on_disk == functions::FUNCTIONS_MD,
        "FUNCTIONS.md is stale: rerun with EVENFLUSH_BLESS=1"
    );
    assert!(
        functions::FUNCTIONS.len() >= 120,
        "only {} functions",
        functions::FUNCTIONS.len()
    );
}
