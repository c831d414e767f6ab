//! One location (a rank's recording thread) being written: its event writer, the call held until
//! its completions are known, and the time and count bookkeeping every record goes through.

use std::cell::Cell;

use format::{Completion, MpiCall};

use super::Otf2Summary;
use super::ffi::{self, EvtWriter, check};
use crate::export::ExportError;

/// Location ids: rank in the high bits, stream in the low 16 (streams are thread indices).
pub(super) fn location_id(rank: u32, stream: u32) -> u64 {
    (u64::from(rank) << 16) | u64::from(stream & 0xffff)
}

/// What one location has had written: its last time and its number of records.
#[derive(Default)]
pub(super) struct Written {
    pub last: u64,
    pub events: u64,
}

/// One location being written.
pub(super) struct Lane<'f> {
    pub writer: EvtWriter<'f>,
    pub written: Written,
    /// A call waits here until the completions that follow it are known.
    pub pending: Option<(MpiCall, Vec<Completion>)>,
    /// Communicators (false) and windows (true) defined since the last call: the recorder
    /// defines what a call creates just before the call's own record.
    pub new_defs: Vec<(u32, bool)>,
    /// Those defined just before the pending call.
    pub call_defs: Vec<(u32, bool)>,
}

impl<'f> Lane<'f> {
    pub fn new(writer: EvtWriter<'f>) -> Self {
        Lane {
            writer,
            written: Written::default(),
            pending: None,
            new_defs: Vec::new(),
            call_defs: Vec::new(),
        }
    }
}

/// What every location shares: the archive's latest time (for its flush callback), the time
/// range written, and the summary.
pub(super) struct Writer<'a> {
    pub latest: &'a Cell<u64>,
    pub min_ts: u64,
    pub max_ts: u64,
    pub summary: Otf2Summary,
}

impl Writer<'_> {
    /// A time for a location: never before its previous one.
    pub fn ts(&mut self, at: &mut Written, global_ns: u64) -> u64 {
        let t = global_ns.max(at.last);
        at.last = t;
        self.min_ts = self.min_ts.min(t);
        self.max_ts = self.max_ts.max(t);
        self.latest.set(t);
        t
    }

    /// Counts a record written on a location, and turns the library's code into a result.
    pub fn done(
        &mut self,
        at: &mut Written,
        code: ffi::OTF2_ErrorCode,
        what: &str,
    ) -> Result<(), ExportError> {
        at.events += 1;
        self.summary.events += 1;
        check(code, what)
    }
}

/// Where the records of one call go: its location's writer, and a counter-and-checker of every
/// record written (the caller's event count and error handling).
pub(super) struct Out<'a> {
    pub w: &'a EvtWriter<'a>,
    pub done: &'a mut dyn FnMut(ffi::OTF2_ErrorCode, &'static str) -> Result<(), ExportError>,
}
