//! The binomial tree rooted at rank 0 that carries Z to every rank ([`tree_broadcast`]) and along
//! which the tree clock scheme measures offsets: ⌈log2 P⌉ messages deep, each rank's parent found
//! from its rank alone.

use crate::protocol_tags::SUSPENSION_Z;
use crate::transport::{AsyncTransport, Blocking, Transport, TransportError, block_on};

/// Depth of the binomial tree of `size` ranks: ⌈log2 size⌉ messages from the root to the
/// farthest rank.
pub(crate) fn tree_depth(size: usize) -> u32 {
    if size <= 1 {
        0
    } else {
        usize::BITS - (size - 1).leading_zeros()
    }
}

fn highest_bit(rank: usize) -> usize {
    if rank == 0 {
        0
    } else {
        1 << (usize::BITS - 1 - rank.leading_zeros())
    }
}

/// `rank`'s parent in the binomial tree rooted at rank 0 (`None` for the root).
pub(crate) fn tree_parent(rank: usize) -> Option<usize> {
    (rank != 0).then(|| rank - highest_bit(rank))
}

/// `rank`'s children in the binomial tree of `size` ranks, largest subtree first. Child
/// `rank + b` (for powers of two `b` above `rank`'s highest bit) roots the ranks that share its
/// low bits, so the smallest `b` has the largest subtree.
pub(crate) fn tree_children(rank: usize, size: usize) -> Vec<usize> {
    let mut bit = if rank == 0 { 1 } else { highest_bit(rank) << 1 };
    let mut children = Vec::new();
    while bit != 0 {
        match rank.checked_add(bit) {
            Some(child) if child < size => children.push(child),
            _ => break,
        }
        bit = bit.checked_shl(1).unwrap_or(0);
    }
    children
}

/// Binomial-tree broadcast of one value from rank 0; every rank returns it. The root sends to the
/// child with the largest subtree first, so the tree is ⌈log2 P⌉ messages deep.
pub fn tree_broadcast<T: Transport + ?Sized>(
    transport: &mut T,
    value: u64,
) -> Result<u64, TransportError> {
    block_on(tree_broadcast_async(&mut Blocking(transport), value))
}

/// [`tree_broadcast`] over any [`AsyncTransport`].
pub async fn tree_broadcast_async<A: AsyncTransport>(
    transport: &mut A,
    value: u64,
) -> Result<u64, TransportError> {
    let rank = transport.rank();
    let value = match tree_parent(rank) {
        None => value,
        Some(parent) => transport.recv_u64(parent, SUSPENSION_Z).await?,
    };
    for child in tree_children(rank, transport.size()) {
        transport.send_u64(child, SUSPENSION_Z, value).await?;
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_depth_is_ceil_log2() {
        let depths: Vec<u32> = [1, 2, 3, 4, 5, 8, 9, 16, 17]
            .iter()
            .map(|&p| tree_depth(p))
            .collect();
        assert_eq!(depths, vec![0, 1, 2, 2, 3, 3, 4, 4, 5]);
    }

    #[test]
    fn children_come_largest_subtree_first_and_parents_match() {
        fn subtree(rank: usize, size: usize) -> usize {
            1 + tree_children(rank, size)
                .into_iter()
                .map(|c| subtree(c, size))
                .sum::<usize>()
        }
        for size in 1..70usize {
            assert_eq!(subtree(0, size), size, "every rank is reached once");
            for rank in 0..size {
                let children = tree_children(rank, size);
                for &child in &children {
                    assert_eq!(tree_parent(child), Some(rank));
                }
                let sizes: Vec<usize> = children.iter().map(|&c| subtree(c, size)).collect();
                assert!(
                    sizes.windows(2).all(|w| w[0] >= w[1]),
                    "size {size} rank {rank}: {sizes:?}"
                );
            }
        }
    }

    /// ⌈log2 P⌉, counted without the crate's own helpers.
    fn ceil_log2(size: usize) -> u32 {
        let mut depth = 0;
        while (1usize << depth) < size {
            depth += 1;
        }
        depth
    }

    proptest::proptest! {
        /// The tree's properties, not its formula: from every rank, following `tree_parent`
        /// reaches rank 0 through ever smaller ranks within ⌈log2 P⌉ hops; the parents and
        /// children agree; and walking down from the root reaches every rank exactly once.
        #[test]
        fn tree_reaches_the_root_from_every_rank_within_log2_hops(size in 1usize..5000) {
            let depth = ceil_log2(size);
            proptest::prop_assert_eq!(tree_depth(size), depth);
            proptest::prop_assert_eq!(tree_parent(0), None);
            for rank in 0..size {
                let mut hops = 0;
                let mut r = rank;
                while let Some(parent) = tree_parent(r) {
                    proptest::prop_assert!(parent < r, "size {} rank {}: parent {} of {}", size, rank, parent, r);
                    proptest::prop_assert!(
                        tree_children(parent, size).contains(&r),
                        "size {} rank {}: {} not among its parent's children", size, rank, r
                    );
                    r = parent;
                    hops += 1;
                }
                proptest::prop_assert_eq!(r, 0);
                proptest::prop_assert!(hops <= depth, "size {} rank {}: {} hops", size, rank, hops);
            }
            let mut seen = vec![0u32; size];
            let mut stack = vec![0usize];
            while let Some(r) = stack.pop() {
                seen[r] += 1;
                stack.extend(tree_children(r, size));
            }
            proptest::prop_assert!(seen.iter().all(|&n| n == 1), "size {}: {:?}", size, seen);
        }
    }
}
