//! Placeholder: the recorder issue fills this crate (Rust core of the LD_PRELOAD library).
