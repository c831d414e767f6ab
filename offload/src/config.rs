//! Run settings: one table shared by the CLI flags and the `EVENFLUSH_*` environment variables.
