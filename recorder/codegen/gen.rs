//! Generator for the recorder's C layer, shared by the build scripts of `recorder` (function name
//! table) and of the preload packages (C and Fortran wrappers). It reads `mpi_functions.tsv`, the one
//! table of wrapped functions; every wrapper body is derived from a row, none is written by hand.
//!
//! Roles (last column of the table) name the parameters the recorder reads:
//! - `comm`, `peer`, `tag`, `root`: copied into the call record (peer/tag wildcards and the
//!   `MPI_ROOT`/`MPI_PROC_NULL` roots mapped to the trace's values).
//! - `count`+`type`: bytes = count x `PMPI_Type_size(type)`; `vcounts`+`type`: the sum over the
//!   communicator's (remote) size; `inplace`: that buffer being `MPI_IN_PLACE` means bytes = 0
//!   (the count/type arguments are then not significant and may be garbage).
//! - `req`/`preq` (+`reqkind`): the call creates a request (persistent for `preq`); `start`,
//!   `startall`+`n`: the call starts persistent requests; `freereq`: the request is freed;
//!   `ureq`: the call works on a live request without changing it (`Pready*`, `Parrived` on a
//!   partitioned request): the record names that request's id.
//! - `cancel`: the call may cancel a request. Until one such call, no completion can be a
//!   cancelled one, and completions skip asking MPI (`PMPI_Test_cancelled`).
//! - `complete`: a Wait/Test family call; with `wreq` or `wreqs`+`n`, `status`/`statuses`, `flag`,
//!   `index`, `outcount`+`indices`. Each completed request becomes a `Completion` record.
//! - `recvstatus`: a blocking receive; its status becomes a `Completion` without request.
//! - `newcomm`: the call creates a communicator (defined right away); `freecomm`: frees one;
//!   `dupcomm`: the call returns a communicator with the group of `comm` that may not be used
//!   before a request completes (`MPI_Comm_idup`): it is defined from `comm`'s group at once.
//! - `origin` (with `newcomm`/`dupcomm`): what identifies the new communicator across ranks, in a
//!   `CommOrigin` after its `CommDef`: `parent` (a call collective over `comm`, counted per
//!   `comm` at every successful call, `MPI_COMM_NULL` results included), `group`
//!   (`MPI_Comm_create_group`: `comm`, `tag` and the members), `tagged` (`stringtag` and the
//!   members: `MPI_Comm_create_from_group`).
//! - `win`: the call works on a window; the window's id goes into the record's `comm` field.
//!   `newwin` (with `comm`): the call creates a window over `comm`; `freewin`: frees one.
//!   `group` (with `win`): the group of a PSCW epoch (`Win_post`, `Win_start`), recorded as world
//!   ranks in an `EpochGroup` just before the call's record, so the reader can pair the epochs.
//! - `newmsg` (+ `comm`, optionally `flag`): a matched probe returns a message handle, remembered
//!   with its communicator; `msg`: `Mrecv`/`Imrecv` take it, and the record gets that communicator.
//! - receive bytes of collectives (the record's `recv_bytes`): `rcount`+`rtype` (type defaults
//!   to `type`), bytes of one piece; `rper=rank`: one piece from every rank of the (remote) group;
//!   `rvcounts`: the sum of a count array over the (remote) group; `rmine`: this rank's entry of a
//!   count array (`Reduce_scatter`). `rwhere=root`: only the root receives; `others`: every rank
//!   but the root (and, on an intercommunicator, only the root's remote group); `receivers`: all,
//!   except the root's group of an intercommunicator, whose receive arguments are not significant.
//!   `rinplace`: that buffer being `MPI_IN_PLACE` means nothing arrives.
//! - `partitions`: bytes are multiplied by the number of partitions (partitioned communication).
//! - `level`: `MPI_Pcontrol`'s level, stored in the record's `tag` field.
//! - `fortran=noierr`: the Fortran binding has no IERROR argument (`MPI_PCONTROL`).
//!
//! A row whose C function the MPI's headers do not declare is left out of that MPI's build (see
//! `declared_in`), so one table serves MPIs of different standard levels.

// Each build script uses part of the generator: what the other one uses is not dead.
#![allow(dead_code, unused_imports)]

mod args;
mod docs;
mod record;
mod table;
mod wrappers;

pub use docs::{functions_md, rust_table};
pub use table::{CATEGORIES, Func, Kind, Param, parse};
pub use wrappers::{c_layer, declared_in, fortran_symbols, is_large_count};
