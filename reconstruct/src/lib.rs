//! Placeholder: the reconstruct issue fills this crate with trace alignment on the global clock,
//! removal of DP' and DP, happened-before matching and repair, and run comparison. Nothing here yet.
