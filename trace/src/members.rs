//! Communicator member lists, shared between the ranks that define the same communicator.
//!
//! Every rank's trace defines `MPI_COMM_WORLD` with all its members, so a copy per rank costs
//! O(R²): 64 MiB at 4096 ranks for the world alone, and more for each duplicate of it. A list is
//! interned once here and every rank holding it shares one allocation.
//!
//! The table is process-wide so that the first pass ([`crate::scan::scan_rank`], one rank at a
//! time, by whichever caller) shares lists without being handed a table. It holds weak
//! references only: lists live as long as some rank's metadata does.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::sync::{Arc, Mutex, Weak};

/// A communicator's members as world ranks, in communicator rank order.
pub type Members = Arc<[u32]>;

#[derive(Default)]
struct Table {
    by_hash: HashMap<u64, Vec<Weak<[u32]>>>,
    /// Buckets when dead entries were last swept out: sweeping again once the table doubled
    /// keeps the sweeps' cost proportional to the interning done.
    swept_at: usize,
}

static TABLE: Mutex<Option<Table>> = Mutex::new(None);

fn hash(members: &[u32]) -> u64 {
    BuildHasherDefault::<DefaultHasher>::default().hash_one(members)
}

/// The shared list equal to `members`.
pub fn intern(members: &[u32]) -> Members {
    let h = hash(members);
    // A poisoned table is still consistent: every step below leaves it valid.
    let mut guard = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    let table = guard.get_or_insert_with(Table::default);
    let bucket = table.by_hash.entry(h).or_default();
    bucket.retain(|w| w.strong_count() > 0);
    if let Some(found) = bucket
        .iter()
        .filter_map(Weak::upgrade)
        .find(|a| **a == *members)
    {
        return found;
    }
    let shared: Members = members.into();
    bucket.push(Arc::downgrade(&shared));
    if table.by_hash.len() > 2 * table.swept_at.max(64) {
        table.by_hash.retain(|_, bucket| {
            bucket.retain(|w| w.strong_count() > 0);
            !bucket.is_empty()
        });
        table.swept_at = table.by_hash.len();
    }
    shared
}

/// Gives distinct member lists small numbers, comparing each distinct allocation's contents once:
/// lists interned by [`intern`] are recognised by address, so the world's 4096 members are not
/// hashed again for each of 4096 ranks.
#[derive(Default)]
pub struct ListIds {
    by_addr: HashMap<(usize, usize), (u32, Members)>,
    by_content: HashMap<Members, u32>,
}

impl ListIds {
    pub fn id(&mut self, members: &Members) -> u32 {
        // The Arc kept beside the address keeps the allocation (and so the address) from being
        // reused by another list while this table lives.
        let addr = (members.as_ptr() as usize, members.len());
        if let Some((id, _)) = self.by_addr.get(&addr) {
            return *id;
        }
        let next = self.by_content.len() as u32;
        let id = *self.by_content.entry(members.clone()).or_insert(next);
        self.by_addr.insert(addr, (id, members.clone()));
        id
    }
}

/// `rank`'s position in `members`; O(1) when the list is the identity there (the world, and
/// communicators that keep world ranks in place), a scan otherwise.
pub fn position(members: &[u32], rank: u32) -> Option<u32> {
    if members.get(rank as usize) == Some(&rank) {
        return Some(rank);
    }
    members.iter().position(|&m| m == rank).map(|p| p as u32)
}

/// `0..n`, shared.
pub fn identity(n: u32) -> Members {
    intern(&(0..n).collect::<Vec<u32>>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_lists_share_one_allocation_while_alive() {
        let a = intern(&[3, 1, 2, 99_001]);
        let b = intern(&[3, 1, 2, 99_001]);
        assert!(Arc::ptr_eq(&a, &b));
        let c = intern(&[3, 1, 2, 99_002]);
        assert!(!Arc::ptr_eq(&a, &c));
        let weak = Arc::downgrade(&a);
        drop((a, b));
        // Nothing but the ranks' metadata keeps a list alive: the table holds weak references.
        assert_eq!(weak.strong_count(), 0);
        assert_eq!(&*intern(&[3, 1, 2, 99_001]), &[3, 1, 2, 99_001]);
    }

    #[test]
    fn list_ids_go_by_content() {
        let mut ids = ListIds::default();
        let a: Members = vec![5, 6].into();
        let b: Members = vec![5, 6].into();
        let c: Members = vec![6, 5].into();
        assert_eq!(ids.id(&a), ids.id(&b));
        assert_ne!(ids.id(&a), ids.id(&c));
        assert_eq!(ids.id(&a), 0);
    }

    #[test]
    fn position_finds_ranks_anywhere() {
        assert_eq!(position(&[0, 1, 2], 1), Some(1));
        assert_eq!(position(&[4, 2, 9], 9), Some(2));
        assert_eq!(position(&[4, 2, 9], 3), None);
    }
}
