//! What a flush reports back to the protocol that ran it: the protocol sizes nothing itself, it
//! records the caller's figures in the suspension record.

/// What the caller's flush wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlushReport {
    pub bytes_raw: u64,
    pub bytes_stored: u64,
}
