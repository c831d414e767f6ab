//! What the replay needs to know about the machine, learned from the run itself: how long a call
//! takes when it waits for nothing (its intrinsic cost), how long a message takes from its send's
//! start to the end of the receive that waited for it (its transfer time), and how long a
//! collective takes from its last awaited entry to an exit.
//!
//! Every figure is a minimum over the instances of its class, taken in the times as recorded (the
//! global clock, nothing removed), where what happened is physically consistent. Each instance is
//! an upper bound of the true figure: a receive cannot end before its message arrived, nor a call
//! before its own work is done; so the minimum is exact as soon as one instance of the class did
//! wait (a transfer) or did not (an intrinsic cost), and never below the truth but by noise.
//!
//! Transfer times are kept per (sender's clock group, receiver's clock group): between hosts, an
//! error ε in the measured offset moves every recorded transfer of that pair by the same ε, and
//! the replay adds the estimate to the sender's time in the sender's clock, so ε cancels. It is
//! learned across clock groups as it is within one, and the offsets' uncertainty enters only here.
//!
//! The tables are small (classes, not events) and merge by a minimum, so processes that each
//! learn from their own ranks agree by exchanging them (a distributed replay needs no more).

use std::collections::BTreeMap;

/// Sizes in powers of two: a class spans a factor of two in bytes (or completions).
pub fn size_class(n: u64) -> u8 {
    (64 - n.leading_zeros()) as u8
}

/// Intrinsic cost of a call: function (global id, see `HbContext`), size class.
pub type CallClass = (u32, u8);
/// Transfer of a message: sender's clock group, receiver's clock group, size class.
pub type TransferClass = (u32, u32, u8);
/// A collective exit after its last awaited entry: function, size class, members' class, the
/// exiting rank's clock group, the last entrant's clock group.
pub type ExitClass = (u32, u8, u8, u32, u32);

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Estimates {
    pub intrinsic: BTreeMap<CallClass, u64>,
    pub transfer: BTreeMap<TransferClass, i64>,
    pub exit: BTreeMap<ExitClass, i64>,
    /// Instances seen per table (their count tells how much an estimate rests on).
    pub samples: [u64; 3],
}

fn offer<K: Ord, V: Ord + Copy>(map: &mut BTreeMap<K, V>, key: K, value: V) {
    map.entry(key)
        .and_modify(|v| *v = (*v).min(value))
        .or_insert(value);
}

impl Estimates {
    pub fn learn_intrinsic(&mut self, class: CallClass, duration: u64) {
        self.samples[0] += 1;
        offer(&mut self.intrinsic, class, duration);
    }

    /// `observed`: receive end minus send start, as recorded (negative only through clock error).
    pub fn learn_transfer(&mut self, class: TransferClass, observed: i64) {
        self.samples[1] += 1;
        offer(&mut self.transfer, class, observed);
    }

    /// `observed`: exit minus the latest awaited entry of another member, as recorded.
    pub fn learn_exit(&mut self, class: ExitClass, observed: i64) {
        self.samples[2] += 1;
        offer(&mut self.exit, class, observed);
    }

    /// The fastest this call was seen to run, or its own duration if its class was never seen.
    pub fn intrinsic(&self, class: CallClass, own: u64) -> u64 {
        self.intrinsic.get(&class).map_or(own, |&c| c.min(own))
    }

    /// The transfer time of a message of this class; `floor` where the class was never seen.
    pub fn transfer(&self, class: TransferClass, floor: u64) -> i64 {
        self.transfer.get(&class).copied().unwrap_or(floor as i64)
    }

    pub fn exit(&self, class: ExitClass, floor: u64) -> i64 {
        self.exit.get(&class).copied().unwrap_or(floor as i64)
    }

    /// Takes in what another learner saw (another process's ranks, or another pass).
    pub fn merge(&mut self, other: &Estimates) {
        for (&k, &v) in &other.intrinsic {
            offer(&mut self.intrinsic, k, v);
        }
        for (&k, &v) in &other.transfer {
            offer(&mut self.transfer, k, v);
        }
        for (&k, &v) in &other.exit {
            offer(&mut self.exit, k, v);
        }
        for (s, o) in self.samples.iter_mut().zip(other.samples) {
            *s += o;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_span_a_factor_of_two() {
        assert_eq!(size_class(0), 0);
        assert_eq!(size_class(1), 1);
        assert_eq!(size_class(2), 2);
        assert_eq!(size_class(3), 2);
        assert_eq!(size_class(4), 3);
        assert_eq!(size_class(u64::MAX), 64);
    }

    #[test]
    fn each_table_keeps_its_minimum_and_merging_is_a_minimum_too() {
        let mut a = Estimates::default();
        a.learn_intrinsic((1, 0), 50);
        a.learn_intrinsic((1, 0), 30);
        a.learn_transfer((0, 0, 3), 900);
        let mut b = Estimates::default();
        b.learn_intrinsic((1, 0), 40);
        b.learn_transfer((0, 0, 3), 700);
        b.learn_exit((2, 0, 1, 0, 0), 10);
        a.merge(&b);
        assert_eq!(a.intrinsic((1, 0), 1000), 30);
        assert_eq!(
            a.intrinsic((1, 0), 20),
            20,
            "never longer than the call itself"
        );
        assert_eq!(
            a.intrinsic((9, 0), 77),
            77,
            "an unseen class keeps the call's own time"
        );
        assert_eq!(a.transfer((0, 0, 3), 100), 700);
        assert_eq!(a.transfer((0, 1, 3), 100), 100);
        assert_eq!(a.exit((2, 0, 1, 0, 0), 100), 10);
        assert_eq!(a.samples, [3, 2, 1]);
    }
}
