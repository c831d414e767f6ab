//! The offload protocol's transport over the C layer's private MPI communicator
//! ([`crate::mpi_link`]), and the diagnostic that exercises it (`EVENFLUSH_CHECK_LINK`).

use crate::lifecycle::session::session;
use crate::mpi_link::{Link, LinkError, link};

/// The offload protocol's [`offload::Transport`] over the private MPI communicator, with the
/// recorder's calibrated clock in nanoseconds: `ticks × 1e9 / ticks_per_sec`, from tick 0. That is
/// the convention of every offset in the trace (reconstruct and info convert ticks the same way),
/// and TSC readings in ns stay far below 2^53, so they pass through the f64 gather exactly.
pub struct MpiTransport {
    link: Link,
    ticks_per_ns: f64,
}

impl MpiTransport {
    /// The transport, if MPI is up and a session exists.
    pub fn new() -> Option<MpiTransport> {
        let link = link()?;
        let session = session()?;
        Some(MpiTransport {
            link,
            ticks_per_ns: session.clock.ticks_per_sec / 1e9,
        })
    }

    pub fn link(&self) -> Link {
        self.link
    }

    fn rank_arg(&self, rank: usize) -> Result<i32, offload::TransportError> {
        let size = self.link.size().max(0) as usize;
        if rank < size {
            Ok(rank as i32)
        } else {
            Err(offload::TransportError::BadRank(rank, size))
        }
    }
}

fn failed(e: LinkError) -> offload::TransportError {
    offload::TransportError::Failed(e.to_string())
}

/// MPI tags are `int` and must stay below `MPI_TAG_UB` (at least 32767).
fn tag_arg(tag: offload::Tag) -> Result<i32, offload::TransportError> {
    i32::try_from(tag)
        .ok()
        .filter(|t| *t <= 32767)
        .ok_or_else(|| offload::TransportError::Failed(format!("tag {tag} is above 32767")))
}

impl offload::Transport for MpiTransport {
    fn rank(&self) -> usize {
        self.link.rank().max(0) as usize
    }
    fn size(&self) -> usize {
        self.link.size().max(0) as usize
    }
    fn now(&self) -> u64 {
        (crate::clock::now() as f64 / self.ticks_per_ns) as u64
    }
    fn to_tick(&self, local_ns: u64) -> u64 {
        (local_ns as f64 * self.ticks_per_ns) as u64
    }
    fn barrier(&mut self) -> Result<(), offload::TransportError> {
        self.link.barrier().map_err(failed)
    }
    fn allreduce_or(&mut self, flag: bool) -> Result<bool, offload::TransportError> {
        self.link.allreduce_or(flag).map_err(failed)
    }
    fn reduce_f64(
        &mut self,
        value: f64,
        op: offload::transport::ReduceOp,
    ) -> Result<Option<f64>, offload::TransportError> {
        let max = op == offload::transport::ReduceOp::Max;
        self.link.reduce_f64(value, max).map_err(failed)
    }
    fn decision_start(&mut self, word: u64) -> Result<(), offload::TransportError> {
        self.link.decision_start(word).map_err(failed)
    }
    fn decision_finish(&mut self) -> Result<u64, offload::TransportError> {
        self.link.decision_finish().map_err(failed)
    }
    fn send_u64(
        &mut self,
        dest: usize,
        tag: offload::Tag,
        value: u64,
    ) -> Result<(), offload::TransportError> {
        let dest = self.rank_arg(dest)?;
        self.link
            .send_u64(value, dest, tag_arg(tag)?)
            .map_err(failed)
    }
    fn recv_u64(&mut self, src: usize, tag: offload::Tag) -> Result<u64, offload::TransportError> {
        let src = self.rank_arg(src)?;
        self.link.recv_u64(src, tag_arg(tag)?).map_err(failed)
    }
}

/// Diagnostic run at init when `EVENFLUSH_CHECK_LINK` is set: exercises every transport operation
/// once and reports on stderr, so a new MPI or platform can be checked without the protocol.
pub fn self_check() -> Result<String, offload::TransportError> {
    use offload::Transport;
    let mut t = MpiTransport::new()
        .ok_or_else(|| offload::TransportError::Failed("no transport".into()))?;
    let (rank, size) = (t.rank(), t.size());
    let any_odd = t.allreduce_or(rank % 2 == 1)?;
    let highest = t.reduce_f64(rank as f64, offload::transport::ReduceOp::Max)?;
    t.decision_start(1 << rank.min(63))?;
    let word = t.decision_finish()?;
    if size > 1 {
        let next = (rank + 1) % size;
        let prev = (rank + size - 1) % size;
        // Even ranks send first so the ring cannot deadlock even with synchronous sends.
        if rank % 2 == 0 {
            t.send_u64(next, 0x4500, rank as u64)?;
            let got = t.recv_u64(prev, 0x4500)?;
            if got != prev as u64 {
                return Err(offload::TransportError::Failed(format!(
                    "ring got {got}, expected {prev}"
                )));
            }
        } else {
            let got = t.recv_u64(prev, 0x4500)?;
            t.send_u64(next, 0x4500, rank as u64)?;
            if got != prev as u64 {
                return Err(offload::TransportError::Failed(format!(
                    "ring got {got}, expected {prev}"
                )));
            }
        }
    }
    let root_value = t
        .link()
        .bcast_f64(if rank == 0 { 42.5 } else { 0.0 }, 0)
        .map_err(failed)?;
    t.barrier()?;
    let t0 = t.now();
    let tick = t.to_tick(t0);
    Ok(format!(
        "rank {rank}/{size}: allreduce_or={any_odd} reduce_max={highest:?} decision={word:#x} bcast={root_value} now={t0}ns tick={tick}"
    ))
}
