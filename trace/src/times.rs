//! Every timestamp field of an event, in one place, so no transformation forgets one.

use format::{Event, Marker};

/// Calls `f` on every timestamp (in ticks) the event carries.
pub fn for_each_time(e: &mut Event, mut f: impl FnMut(&mut u64)) {
    match e {
        Event::Call(c) => {
            f(&mut c.start);
            f(&mut c.end);
        }
        Event::User(u) => f(&mut u.time),
        Event::Region(r) => f(&mut r.time),
        Event::Suspension(s) => {
            f(&mut s.start);
            f(&mut s.end);
        }
        Event::Clock(s) => f(&mut s.local),
        Event::Memory(m) => f(&mut m.time),
        Event::Threshold(t) => f(&mut t.time),
        Event::Polls(p) => {
            f(&mut p.start);
            f(&mut p.end);
        }
        Event::Marker(m) => match m {
            Marker::LocalFlush { time, .. }
            | Marker::RecordingStopped { time }
            | Marker::Lost { time, .. }
            | Marker::AbnormalEnd { time, .. }
            | Marker::InitDone { time }
            | Marker::FinalizeStart { time }
            | Marker::Stuck { time, .. }
            | Marker::Compressed { time, .. }
            | Marker::MemoryLow { time, .. } => f(time),
        },
        Event::Completion(_)
        | Event::CommDef { .. }
        | Event::StringDef { .. }
        | Event::FunctionDef { .. }
        | Event::RankInfo(_)
        | Event::Writer(_)
        | Event::RemoteGroup { .. }
        | Event::WinDef { .. }
        | Event::EpochGroup { .. }
        | Event::CommOrigin { .. }
        | Event::CallSite(_) => {}
    }
}
