//! What a point-to-point record leaves to an earlier one of its rank (see
//! [`crate::funcs::Deferred`]), followed in one place for every view that needs it (the profile's
//! partners, the happened-before matching, the Perfetto flows, the OTF2 export), so that they
//! agree on which `Start` sends, to whom, and on which communicator a matched receive is:
//!
//! - a `Start` record names only its request: destination, tag, communicator and size are on the
//!   `*_init` record that created the request, and hold for every start of it;
//! - an `Mrecv`/`Imrecv` record names no communicator, and no source or tag but through its
//!   status: the matched probe (`Mprobe`, `Improbe`) whose message it takes does.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;

use crate::model::{MpiCall, NO_REQUEST};

/// The persistent point-to-point requests of one rank, by request id, as their `*_init` records
/// describe them. (Request ids are the recorder's: an id created again replaces the old entry.)
#[derive(Clone, Debug, Default)]
pub struct PersistentRequests<S = RandomState> {
    by_request: HashMap<u64, Persistent, S>,
}

/// A persistent request: whether it sends, and the `*_init` call that created it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Persistent {
    pub send: bool,
    pub call: MpiCall,
}

impl<S: BuildHasher + Default> PersistentRequests<S> {
    /// Takes a `*_init` record (`send`: of a send request).
    pub fn init(&mut self, send: bool, c: &MpiCall) {
        if c.request != NO_REQUEST {
            self.by_request
                .insert(c.request, Persistent { send, call: *c });
        }
    }

    /// What the `Start` record `c` starts: `c` with the destination (or source), tag,
    /// communicator and size of the request's init call; `None` when no `*_init` of this rank
    /// created the request (a persistent collective, or one created before the trace began).
    pub fn started(&self, c: &MpiCall) -> Option<Persistent> {
        let init = &self.by_request.get(&c.request)?;
        let call = MpiCall {
            comm: init.call.comm,
            peer: init.call.peer,
            tag: init.call.tag,
            bytes: init.call.bytes,
            ..*c
        };
        Some(Persistent {
            send: init.send,
            call,
        })
    }
}

/// A matched probe: where its message is (`comm`, a view's own form of the probe's
/// communicator) and, when the probe named them, its source (communicator rank) and tag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe<T> {
    pub comm: T,
    pub source: Option<i32>,
    pub tag: Option<i32>,
}

impl<T> Probe<T> {
    /// The probe of record `c` (an `Mprobe` or `Improbe`), on `comm`: wildcards are `None`.
    pub fn of(c: &MpiCall, comm: T) -> Probe<T> {
        Probe {
            comm,
            source: (c.peer >= 0).then_some(c.peer),
            tag: (c.tag >= 0).then_some(c.tag),
        }
    }
}

/// The matched probes of one rank whose message no `Mrecv`/`Imrecv` took yet.
#[derive(Clone, Debug)]
pub struct MatchedProbes<T> {
    blocking: VecDeque<Probe<T>>,
    /// An `Improbe` that found nothing leaves no message, and the record does not say whether it
    /// found one: only the last is kept, the one an `Imrecv` after a polling loop takes.
    last_improbe: Option<Probe<T>>,
}

impl<T> Default for MatchedProbes<T> {
    fn default() -> Self {
        MatchedProbes {
            blocking: VecDeque::new(),
            last_improbe: None,
        }
    }
}

impl<T> MatchedProbes<T> {
    /// An `Mprobe` (`None`: on a communicator the view does not know; it takes no message).
    pub fn mprobe(&mut self, p: Option<Probe<T>>) {
        if let Some(p) = p {
            self.blocking.push_back(p);
        }
    }

    pub fn improbe(&mut self, p: Option<Probe<T>>) {
        self.last_improbe = p;
    }

    /// The probe whose message a matched receive takes: the oldest `Mprobe` that could have
    /// found a message from `source` (communicator rank) with `tag`, as far as the receive's
    /// status tells them (negative: not told), else the last `Improbe`.
    pub fn take(&mut self, source: Option<i32>, tag: Option<i32>) -> Option<Probe<T>> {
        let source = source.filter(|&s| s >= 0);
        let tag = tag.filter(|&t| t >= 0);
        let fits = |p: &Probe<T>| {
            (p.source.is_none() || source.is_none() || p.source == source)
                && (p.tag.is_none() || tag.is_none() || p.tag == tag)
        };
        if let Some(pos) = self.blocking.iter().position(fits) {
            return self.blocking.remove(pos);
        }
        self.last_improbe.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(request: u64, peer: i32, tag: i32) -> MpiCall {
        MpiCall {
            request,
            peer,
            tag,
            ..MpiCall::default()
        }
    }

    #[test]
    fn a_start_takes_its_init() {
        let mut r: PersistentRequests = PersistentRequests::default();
        let mut init = call(7, 3, 11);
        init.bytes = 16;
        init.comm = 2;
        r.init(true, &init);
        r.init(false, &call(8, 1, 11));
        let mut start = call(7, -1, -1);
        start.start = 100;
        start.end = 110;
        let s = r.started(&start).unwrap();
        assert!(s.send);
        assert_eq!((s.call.peer, s.call.tag, s.call.comm), (3, 11, 2));
        assert_eq!((s.call.bytes, s.call.start, s.call.end), (16, 100, 110));
        assert!(!r.started(&call(8, -1, -1)).unwrap().send);
        assert!(r.started(&call(9, -1, -1)).is_none());
    }

    #[test]
    fn a_matched_receive_takes_the_probe_that_fits() {
        let mut p = MatchedProbes::default();
        p.mprobe(Some(Probe::of(&call(0, 1, 5), "a")));
        p.mprobe(Some(Probe::of(&call(0, -1, 6), "b")));
        p.improbe(Some(Probe::of(&call(0, 2, 7), "i")));
        // From source 2, tag 6: only the wildcard probe could have found it.
        assert_eq!(p.take(Some(2), Some(6)).unwrap().comm, "b");
        // Nothing told: the oldest blocking probe.
        assert_eq!(p.take(None, None).unwrap().comm, "a");
        assert_eq!(p.take(Some(2), Some(7)).unwrap().comm, "i");
        assert!(p.take(None, None).is_none());
    }
}
