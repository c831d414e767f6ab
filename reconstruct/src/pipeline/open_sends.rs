//! The nonblocking sends of a lane whose completion has not come yet, so that a step can leave
//! their completions out of what it hands the matcher. Without the repair (and without
//! learning, which sizes a `Waitall` by its completions), a send's completion changes nothing
//! the matcher counts: a send is matched at its start, and only a receive or a nonblocking
//! collective waits for its request. A halo's `Waitall` completes as many sends as receives, so
//! those completions were a fifth of the events the matcher was handed.
//!
//! A request id names one request at a time: any other recorded call that names an open send's
//! id (a `Wait` or `Test` of it, `Request_free`, `Cancel`, a new request made with it) ends
//! what is known of that send here, so its completion, if one comes, goes to the matcher as it
//! always did. Only what is sure to be a send's completion is left out.

use format::NO_REQUEST;

/// Open sends a lane tracks at most: beyond, further sends' completions are handed over as
/// before (a program with thousands of sends in flight pays nothing for a long search).
const TRACKED: usize = 64;

#[derive(Default)]
pub(super) struct OpenSends {
    requests: Vec<u64>,
}

impl OpenSends {
    /// A call that names `request` (`isend`: it is a nonblocking send that starts it).
    #[inline]
    pub(super) fn call(&mut self, isend: bool, request: u64) {
        if request == NO_REQUEST {
            return;
        }
        if let Some(i) = self.requests.iter().position(|&r| r == request) {
            self.requests.swap_remove(i);
        }
        if isend && self.requests.len() < TRACKED {
            self.requests.push(request);
        }
    }

    /// A completion of `request`: whether it completes a send this lane knows is open (which is
    /// then no longer).
    #[inline]
    pub(super) fn completes_send(&mut self, request: u64) -> bool {
        match self.requests.iter().position(|&r| r == request) {
            Some(i) => {
                self.requests.swap_remove(i);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_known_sends_completion_is_left_out() {
        let mut open = OpenSends::default();
        open.call(true, 7);
        open.call(false, 8);
        assert!(
            !open.completes_send(8),
            "a receive's completion goes to the matcher"
        );
        assert!(open.completes_send(7));
        assert!(!open.completes_send(7), "a request completes once");
    }

    #[test]
    fn a_request_id_named_again_is_no_longer_a_known_send() {
        let mut open = OpenSends::default();
        open.call(true, 7);
        // `Request_free` of the send, then a receive made with the same id.
        open.call(false, 7);
        assert!(!open.completes_send(7));
        open.call(true, 9);
        open.call(false, 9);
        assert!(!open.completes_send(9));
        open.call(true, NO_REQUEST);
        assert!(!open.completes_send(NO_REQUEST));
    }

    #[test]
    fn sends_beyond_the_tracked_ones_keep_their_completions() {
        let mut open = OpenSends::default();
        for r in 1..=(TRACKED as u64 + 1) {
            open.call(true, r);
        }
        assert!(!open.completes_send(TRACKED as u64 + 1));
        assert!(open.completes_send(1));
    }
}
