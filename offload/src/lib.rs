//! The equalised suspension (paper Fig. 3 and 5): decide, flush, compute Z, wait. Generic over a
//! `Transport`, so the same protocol code runs in the real recorder, in in-process tests and in the
//! simulator.

pub mod config;
