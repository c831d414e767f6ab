//! What the engine knows of the trace before it reads an event: per rank, each function's
//! class, each communicator's global identity and members, the clock group and its
//! uncertainty; and the replay's estimates.

use std::collections::HashMap;

use super::matcher::{Class, Comm};
use super::{Estimates, FastMap};
use trace::definitions::RankMeta;

/// Per rank: function classes, the global identity of each communicator, and its clock.
pub struct HbContext {
    pub(super) ranks: Vec<RankCtx>,
    /// World rank → index into `ranks`.
    pub(super) by_world: Vec<Option<usize>>,
    /// What the replay knows of the machine (see [`Repair::replay`]).
    pub(super) estimates: Option<Estimates>,
}

pub(super) struct RankCtx {
    pub(super) world_rank: u32,
    /// Indexed by function id; ids without a definition are `Other`.
    pub(super) classes: Vec<Class>,
    /// Indexed by function id: synchronisations that move no data (barriers, fences), which
    /// wait for the others even with 0 bytes.
    pub(super) pure_syncs: Vec<bool>,
    /// Indexed by function id: the function's id over every rank (function ids are per rank).
    pub(super) global_funcs: Vec<u32>,
    pub(super) comms: FastMap<format::CommId, Comm>,
    /// Ranks with the same clock group read one clock.
    pub(super) clock_group: u32,
    /// Bound on the error of this rank's offset to the global clock, ns.
    pub(super) clock_uncertainty_ns: u64,
}

impl HbContext {
    /// `metas` in rank order, one per rank of the world.
    pub fn new(metas: &[RankMeta], world_size: u32) -> HbContext {
        // The world is one shared list, not a copy per rank; each distinct list is hashed once
        // (`trace::members::ListIds`, in `CommIdentities`), so a world of R ranks costs O(R) here.
        let world = trace::members::identity(world_size);
        let mut identities = trace::comm_identity::CommIdentities::default();
        let mut func_names: HashMap<String, u32> = HashMap::new();
        let mut ranks = Vec::with_capacity(metas.len());
        for meta in metas {
            let mut comms = FastMap::default();
            for (id, members, global) in identities.of_rank(meta, &world) {
                let me = trace::members::position(&members, meta.rank);
                comms.insert(
                    id,
                    Comm {
                        global,
                        members,
                        me,
                    },
                );
            }
            let len = meta
                .functions
                .keys()
                .map(|&id| usize::from(id) + 1)
                .max()
                .unwrap_or(0);
            let mut classes = vec![Class::Other; len];
            // Open MPI's libnbc relays intercommunicator Ibarriers through the groups' first
            // ranks (`InterRole::RelayedByRemoteRoot`); MPICH's waits as the standard says.
            let relays_ibarrier = meta
                .mpi_library
                .as_deref()
                .is_some_and(|l| l.starts_with("Open MPI"));
            for (id, name) in &meta.functions {
                classes[usize::from(*id)] = match Class::of(name) {
                    Class::Icollective(_) if relays_ibarrier && name == "MPI_Ibarrier" => {
                        Class::RelayedIbarrier
                    }
                    class => class,
                };
            }
            let mut pure_syncs = vec![false; len];
            for (id, name) in &meta.functions {
                let name = name.to_ascii_lowercase();
                pure_syncs[usize::from(*id)] = name.contains("barrier") || name.contains("fence");
            }
            let mut global_funcs = vec![u32::MAX; len];
            // In function-id order, not the map's: the processes of a job exchange the
            // estimates, whose classes name these ids, so every process must number alike.
            let mut in_order: Vec<_> = meta.functions.iter().collect();
            in_order.sort_unstable_by_key(|(id, _)| **id);
            for (id, name) in in_order {
                let n = func_names.len() as u32;
                global_funcs[usize::from(*id)] = *func_names.entry(name.clone()).or_insert(n);
            }
            let aligned = meta.aligned.as_ref();
            ranks.push(RankCtx {
                world_rank: meta.rank,
                classes,
                pure_syncs,
                global_funcs,
                comms,
                clock_group: aligned.map_or(u32::MAX - meta.rank, |a| a.group),
                clock_uncertainty_ns: aligned.map_or(0, |a| a.uncertainty_ns.ceil() as u64),
            });
        }
        let mut by_world = vec![None; world_size as usize];
        for (i, r) in ranks.iter().enumerate() {
            let w = r.world_rank as usize;
            if w >= by_world.len() {
                by_world.resize(w + 1, None);
            }
            by_world[w] = Some(i);
        }
        HbContext {
            ranks,
            by_world,
            estimates: None,
        }
    }

    /// What the replay uses (learned by [`run_learning`], over this trace or merged from the
    /// processes of a job).
    pub fn set_estimates(&mut self, estimates: Option<Estimates>) {
        self.estimates = estimates;
    }

    /// The function's id over every rank, for the estimates' classes.
    pub(super) fn global_func(&self, rank_idx: usize, func: format::FunctionId) -> u32 {
        self.ranks
            .get(rank_idx)
            .and_then(|r| r.global_funcs.get(usize::from(func)).copied())
            .unwrap_or(u32::MAX)
    }

    pub(super) fn clock_group(&self, rank_idx: usize) -> u32 {
        self.ranks.get(rank_idx).map_or(u32::MAX, |r| r.clock_group)
    }

    /// Whether calls of `func` on the rank at `rank_idx` (an index into the `metas` given to
    /// [`HbContext::new`]) take part in matching: when nothing is repaired, other calls (and
    /// their completions) change nothing it counts, so they need not reach it.
    pub fn is_communication(&self, rank_idx: usize, func: format::FunctionId) -> bool {
        self.ranks.get(rank_idx).is_some_and(|r| {
            r.classes
                .get(usize::from(func))
                .is_some_and(|&class| class != Class::Other)
        })
    }

    /// Whether `func` starts a nonblocking send (`Isend`, `Issend`, `Ibsend`, `Irsend`).
    pub fn is_isend(&self, rank_idx: usize, func: format::FunctionId) -> bool {
        self.ranks
            .get(rank_idx)
            .is_some_and(|r| r.classes.get(usize::from(func)) == Some(&Class::Isend))
    }

    /// Whether `func` only completes requests (`Wait*`, `Test*`): such a call matters to the
    /// matcher only through the completions recorded after it.
    pub fn is_completion_call(&self, rank_idx: usize, func: format::FunctionId) -> bool {
        self.ranks
            .get(rank_idx)
            .is_some_and(|r| r.classes.get(usize::from(func)) == Some(&Class::Completion))
    }

    /// Whether a collective call of `func` that moved `bytes` depends on the others' entries. A
    /// data collective that moved nothing here (a Bcast or Reduce of count 0, which HPL makes)
    /// returns at once in both MPI libraries: nothing flows, so it waits for nobody.
    pub(super) fn collective_waits(
        &self,
        rank_idx: usize,
        func: format::FunctionId,
        bytes: u64,
    ) -> bool {
        bytes > 0
            || self
                .ranks
                .get(rank_idx)
                .and_then(|r| r.pure_syncs.get(usize::from(func)))
                .copied()
                .unwrap_or(true)
    }

    pub(super) fn index_of(&self, world_rank: u32) -> Option<usize> {
        self.by_world.get(world_rank as usize).copied().flatten()
    }
}
