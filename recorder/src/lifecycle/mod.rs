//! The lifecycle: the session set up at `MPI_Init`, the end of recording (finalize, abort, exit),
//! a forked child kept away from the trace, the signal handlers and the watchdog that end a job
//! with its trace written (every rank's, when the whole job is killed), and the recorder's own
//! threads.

pub mod finish;
pub mod fork;
pub mod killed_together;
pub mod session;
pub mod signals;
pub mod threads;
pub mod watchdog;
