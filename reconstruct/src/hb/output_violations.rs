//! The violations left in the output of a pass that moves waits, counted by the pass itself.

use super::HbReport;

/// The violations that a check of a pass's output (matching it as it is written) would count,
/// counted by the pass itself at each receive and collective exit, against the times it hands
/// out. A send's start and a collective entry are stored for the partners when the call is
/// processed, and judged from there; the replay places a run of polls, and what follows it, only
/// once the wait after it is resolved. Where that moved a stored call away from the time it was
/// stored with, the count no longer describes the output: `exact` is false, and the output is
/// checked by reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputViolations {
    pub messages: u64,
    pub collectives: u64,
    pub epochs: u64,
    pub exact: bool,
}

impl OutputViolations {
    pub(super) const ZERO: OutputViolations = OutputViolations {
        messages: 0,
        collectives: 0,
        epochs: 0,
        exact: true,
    };

    /// The report a check of the output would give, from the pass that wrote it: the same
    /// messages, exits and unmatched calls (the output holds the same events), with these
    /// violations, in times that are the output's as recorded, and nothing moved.
    pub fn as_report(&self, pass: &HbReport) -> HbReport {
        HbReport {
            message_violations: self.messages,
            collective_violations: self.collectives,
            epoch_violations: self.epochs,
            recorded_message_violations: self.messages,
            recorded_collective_violations: self.collectives,
            recorded_epoch_violations: self.epochs,
            max_shift: 0,
            lanes_shifted: 0,
            output: None,
            ..*pass
        }
    }

    /// Of the processes of a split pass: exact only if every part is.
    pub fn merge(a: Option<Self>, b: Option<Self>) -> Option<Self> {
        let (a, b) = (a?, b?);
        Some(OutputViolations {
            messages: a.messages + b.messages,
            collectives: a.collectives + b.collectives,
            epochs: a.epochs + b.epochs,
            exact: a.exact && b.exact,
        })
    }
}
