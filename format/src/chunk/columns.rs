//! The payload's columns (FORMAT.md "Payload: columns v1"): their order, which chunk versions have
//! which, and how wide each field's values may be. The encoder lays columns out by these and the
//! decoder checks and reads them by the same.

pub(crate) const COL_KIND: usize = 0;
pub(crate) const COL_FUNC: usize = 1;
pub(crate) const COL_START: usize = 2;
pub(crate) const COL_DURATION: usize = 3;
pub(crate) const COL_COMM: usize = 4;
pub(crate) const COL_PEER: usize = 5;
pub(crate) const COL_TAG: usize = 6;
pub(crate) const COL_BYTES: usize = 7;
pub(crate) const COL_ROOT: usize = 8;
pub(crate) const COL_REQUEST: usize = 9;
pub(crate) const COL_COST: usize = 10;
/// Since version 6; a version 1-5 payload has no such column (its values read as 0).
pub(crate) const COL_RECV_BYTES: usize = 11;
/// Since version 6, like [`COL_RECV_BYTES`].
pub(crate) const COL_SITE: usize = 12;
pub(crate) const COL_C_REQUEST: usize = 13;
pub(crate) const COL_C_SOURCE: usize = 14;
pub(crate) const COL_C_TAG: usize = 15;
pub(crate) const COL_C_BYTES: usize = 16;
pub(crate) const COL_MISC: usize = 17;
pub(crate) const NUM_COLUMNS: usize = 18;
/// Columns of a version 1-5 payload: all but [`COL_RECV_BYTES`] and [`COL_SITE`].
pub(crate) const NUM_COLUMNS_BEFORE_V6: usize = 16;

/// Whether a payload of chunk `version` has column `col`.
pub(crate) fn has_column(version: u16, col: usize) -> bool {
    version >= 6 || !matches!(col, COL_RECV_BYTES | COL_SITE)
}

/// Numeric columns (all but the kind and misc columns).
pub(crate) const NUM_VALUE_COLUMNS: usize = COL_MISC - COL_FUNC;
/// Numeric columns of calls (`COL_FUNC..COL_C_REQUEST`) and of completions.
pub(crate) const CALL_COLUMNS: usize = COL_C_REQUEST - COL_FUNC;
pub(crate) const COMPLETION_COLUMNS: usize = COL_MISC - COL_C_REQUEST;

/// Bytes a numeric column's values may use: 16-bit fields 2, 32-bit ones (and the zigzagged
/// `i32` fields, whose zigzag images are exactly the values below 2^32) 4, 64-bit ones 8.
pub(crate) const fn field_bytes(col: usize) -> usize {
    match col {
        COL_FUNC => 2,
        COL_COMM | COL_PEER | COL_TAG | COL_ROOT | COL_COST | COL_SITE | COL_C_SOURCE
        | COL_C_TAG => 4,
        _ => 8,
    }
}
