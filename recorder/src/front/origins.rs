//! How each communicator was made (`Event::CommOrigin`): what identifies it on every member,
//! counted here per parent (and for the group-made ones per tag and members). Communicator
//! creation is rare and not on the per-call path, so a lock does.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Mutex;

use format::{CommId, CommOrigin, Event, NO_COMM};

use super::record::record_event;

/// The forms of the C layer's `evf_rec_comm_origin` (as `CommOrigin`'s).
pub const FORM_PARENT: u32 = 0;
pub const FORM_GROUP: u32 = 1;
pub const FORM_TAGGED: u32 = 2;

#[derive(Clone, PartialEq, Eq, Hash)]
enum Counter {
    Parent(CommId),
    Group(CommId, i32, Vec<u32>),
    Tagged(String, Vec<u32>),
}

/// Constructors seen so far, by what they are counted on. Parents' ids are never reused (the C
/// layer's counter only grows), so a freed parent's count cannot leak into a new one.
static COUNTS: Mutex<Option<HashMap<Counter, u32>>> = Mutex::new(None);

thread_local! {
    /// The members of the communicator this thread defined last: a group-made communicator's
    /// `CommDef` is written by the same thread just before its origin.
    static LAST_DEF: RefCell<Option<(CommId, Vec<u32>)>> = const { RefCell::new(None) };
}

/// Remembers `id`'s members for the origin that may follow (see `LAST_DEF`).
pub fn defined(id: CommId, members: &[u32]) {
    LAST_DEF.with(|d| *d.borrow_mut() = Some((id, members.to_vec())));
}

fn next(counter: Counter) -> u32 {
    // A poisoned map still holds whole counts: every step leaves it consistent.
    let mut guard = COUNTS.lock().unwrap_or_else(|e| e.into_inner());
    let n = guard
        .get_or_insert_with(HashMap::new)
        .entry(counter)
        .or_default();
    *n += 1;
    *n - 1
}

/// A constructor of `form` returned `id` (`NO_COMM` when this rank got `MPI_COMM_NULL`, which
/// still counts on the parent: the other members count the call too).
pub fn made(id: CommId, form: u32, parent: CommId, tag: i32, stringtag: &[u8]) {
    let members = || {
        LAST_DEF.with(|d| match &*d.borrow() {
            Some((last, m)) if *last == id => Some(m.clone()),
            _ => None,
        })
    };
    let origin = match form {
        FORM_PARENT if parent != NO_COMM => {
            let index = next(Counter::Parent(parent));
            CommOrigin::Parent { parent, index }
        }
        // Only the group's members call these, and each gets a communicator; without its
        // members (an id defined earlier) it is identified as before, by members and order.
        FORM_GROUP if parent != NO_COMM => {
            let Some(m) = members() else { return };
            let index = next(Counter::Group(parent, tag, m));
            CommOrigin::Group { parent, tag, index }
        }
        FORM_TAGGED => {
            let Some(m) = members() else { return };
            // Fortran passes the tag blank-padded.
            let tag = String::from_utf8_lossy(stringtag).trim_end().to_string();
            let index = next(Counter::Tagged(tag.clone(), m));
            CommOrigin::Tagged { tag, index }
        }
        _ => return,
    };
    if id != NO_COMM {
        record_event(&Event::CommOrigin { id, origin });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_go_per_parent_and_per_members_and_tag() {
        let p = 1_000_001;
        assert_eq!(next(Counter::Parent(p)), 0);
        assert_eq!(next(Counter::Parent(p + 1)), 0);
        assert_eq!(next(Counter::Parent(p)), 1);
        assert_eq!(next(Counter::Group(p, 3, vec![0, 1])), 0);
        assert_eq!(next(Counter::Group(p, 3, vec![0, 2])), 0);
        assert_eq!(next(Counter::Group(p, 3, vec![0, 1])), 1);
        assert_eq!(next(Counter::Tagged("x".into(), vec![1])), 0);
        assert_eq!(next(Counter::Tagged("x".into(), vec![1])), 1);
    }
}
