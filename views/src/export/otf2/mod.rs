//! OTF2 archives (the format of Score-P, read by Vampir, Scalasca, `otf2-print`), written through
//! the system's OTF2 library (`libopen-trace-format2`; every `unsafe` call is in `ffi`). Compiled in
//! when `build.rs` finds the library's headers (`cfg(have_otf2)`); otherwise [`export`] says so.
//!
//! What is written:
//! - one location group (process) per rank, one location (thread) per recording stream;
//! - every MPI call as the Enter/Leave of a region named after the function (role by kind);
//! - point-to-point records: `MpiSend` at a blocking send's start, `MpiIsend` at a nonblocking
//!   send's start and `MpiIsendComplete` at the end of the `Wait*`/`Test*` that completed it,
//!   `MpiIrecvRequest` at an `Irecv` and `MpiIrecv` (source, tag and size from the status) at the end
//!   of the call that completed it, `MpiRecv` at the end of a blocking receive; `Sendrecv` gives an
//!   `MpiSend` and an `MpiRecv`. Peers are ranks within the communicator, as OTF2 wants;
//! - blocking collectives as `MpiCollectiveBegin`/`MpiCollectiveEnd` inside their region, with
//!   the recorded bytes as the size sent (what this rank's send buffer holds) and the bytes that
//!   arrived in its receive buffer as the size received (`MpiCall::recv_bytes`; 0 in traces
//!   recorded before chunk version 6, and for `Alltoallw` and neighbourhood collectives).
//!   Nonblocking collectives are regions only;
//! - one-sided communication as OTF2's RMA records and MPI-IO as its I/O records, as far as the
//!   trace carries them (`rma`, `io` say what is written and what cannot be);
//! - communicators, groups and windows as Scalasca reads them (`comms`): a
//!   `COMM_LOCATIONS` group, `COMM_GROUP`s of world ranks, `MPI_COMM_SELF` over the `COMM_SELF`
//!   group, parents, `InterComm`s, `RmaWin`s; the MPI paradigm with Score-P's name templates.
//!   Debian's python3-otf2 3.0.2 (and Pipit, which reads through it) fails on `InterComm`
//!   definitions and on printing multi-bit flags such as a fence's synchronisation level, as it
//!   does on Score-P's archives: `paper-notes/views.md` has the cause and a workaround;
//! - suspensions as `MeasurementOnOff` (off at the suspension's start, on at its end): every
//!   suspension stops the program, and an analysis should leave the whole interval out, which is
//!   what a measurement-off interval tells OTF2 tools. Inside it, when the rank wrote its trace,
//!   a `BufferFlush` from the start over the write (`write_ns`), as Score-P marks its own flushes;
//! - no `ClockOffset` definitions: the times written are already in the global clock (the
//!   measured offsets applied, `trace::clock`), and offsets would make a reader that applies them
//!   (Scalasca's clock correction) correct twice.
//!
//! Times: the global clock in nanoseconds (timer resolution 1e9), clamped to never decrease
//! within a location as OTF2 requires. Memory: one event buffer per location inside the library,
//! the requests in flight per rank, and the definitions.

#[cfg(have_otf2)]
mod calls;
#[cfg(have_otf2)]
mod comms;
#[cfg(have_otf2)]
mod definitions;
#[cfg(have_otf2)]
mod ffi;
#[cfg(have_otf2)]
mod io;
#[cfg(have_otf2)]
mod location;
#[cfg(have_otf2)]
mod rma;
#[cfg(have_otf2)]
mod write;

use std::path::Path;

use super::ExportError;
use trace::Trace;

/// Whether this build can write OTF2.
pub const AVAILABLE: bool = cfg!(have_otf2);

/// What the export wrote.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Otf2Summary {
    pub locations: u64,
    /// OTF2 event records written, all locations.
    pub events: u64,
    /// `MpiSend` + `MpiIsend` records (one per message sent).
    pub sends: u64,
    /// `MpiRecv` + `MpiIrecv` records.
    pub receives: u64,
    /// `MpiCollectiveEnd` records.
    pub collectives: u64,
    /// `RmaPut` + `RmaGet` + `RmaAtomic` records.
    pub rma_operations: u64,
    /// `IoOperationBegin` records.
    pub io_operations: u64,
    pub suspensions: u64,
    /// `BufferFlush` records: suspensions in which the rank wrote its trace.
    pub buffer_flushes: u64,
    /// What the window left out: calls and suspensions outside its time, and every event of a
    /// rank outside it (whose locations are defined but empty).
    pub cut: u64,
    /// What the window was.
    pub window: String,
    pub skipped: Vec<trace::Skipped>,
}

/// Writes `trace` as an OTF2 archive in directory `out` (`out/traces.otf2` is the anchor file).
/// An earlier archive there is replaced. `progress(done, total)` in events.
pub fn export(
    trace: &Trace,
    out: &Path,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Otf2Summary, ExportError> {
    let window = trace::window::Window::everything(trace.world_size);
    export_window(trace, out, &window, progress)
}

/// [`export`] of what lies in `window`: calls and suspensions that overlap it, their times cut
/// to its edges. Every rank keeps its location group and locations, so that the definitions
/// stay whole; those of ranks outside the window hold no events.
pub fn export_window(
    trace: &Trace,
    out: &Path,
    window: &trace::window::Window,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Otf2Summary, ExportError> {
    #[cfg(have_otf2)]
    {
        write::export(trace, out, window, progress).map(|s| Otf2Summary {
            window: window.describe(),
            ..s
        })
    }
    #[cfg(not(have_otf2))]
    {
        let _ = (trace, out, window, progress);
        Err(ExportError::Other(
            "this evenflush was built without OTF2 support (libopen-trace-format2 headers were not \
             found at build time)"
                .into(),
        ))
    }
}
