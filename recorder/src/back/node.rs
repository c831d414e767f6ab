//! Where a rank sits on its node, and the node's memory figures: what the sampler reads, the
//! node watcher shares and `--threshold auto` sizes S from.

use format::{MemorySample, ThresholdBasis, UNKNOWN_BYTES};

/// Where this rank sits on its node, from the launcher's environment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodePlace {
    pub local_rank: u32,
    pub local_size: u32,
    /// The launcher said so; otherwise every rank is assumed to share one node (which makes
    /// `--threshold auto` conservative) and every rank reads the node's figures.
    pub known: bool,
}

impl NodePlace {
    /// Open MPI's and MPICH's (Hydra's) variables, then Slurm's local id; `world_size` stands in
    /// for the node's size when none is set.
    pub fn from_env(world_size: u32) -> NodePlace {
        let num = |name: &str| std::env::var(name).ok()?.trim().parse::<u32>().ok();
        let pairs = [
            ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
            ("MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
        ];
        for (rank, size) in pairs {
            if let (Some(local_rank), Some(local_size)) = (num(rank), num(size))
                && local_size > 0
                && local_rank < local_size
            {
                return NodePlace {
                    local_rank,
                    local_size,
                    known: true,
                };
            }
        }
        NodePlace {
            local_rank: num("SLURM_LOCALID").unwrap_or(0),
            local_size: world_size.max(1),
            known: false,
        }
    }

    /// Whether this rank reads the node-wide figures.
    pub fn reads_node(&self) -> bool {
        !self.known || self.local_rank == 0
    }
}

/// The node's and cgroup's figures, read together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeMemory {
    pub node_available: u64,
    pub cgroup_limit: u64,
    pub cgroup_usage: u64,
    pub swap_out_pages: u64,
}

impl NodeMemory {
    pub(crate) const UNKNOWN: NodeMemory = NodeMemory {
        node_available: UNKNOWN_BYTES,
        cgroup_limit: UNKNOWN_BYTES,
        cgroup_usage: UNKNOWN_BYTES,
        swap_out_pages: UNKNOWN_BYTES,
    };

    /// What the processes of this node (and cgroup) can still get, and from where.
    pub fn available(&self) -> (Option<u64>, ThresholdBasis) {
        let sample = MemorySample {
            node_available: self.node_available,
            cgroup_limit: self.cgroup_limit,
            cgroup_usage: self.cgroup_usage,
            ..Default::default()
        };
        let cgroup_free = (self.cgroup_limit != UNKNOWN_BYTES
            && self.cgroup_usage != UNKNOWN_BYTES)
            .then(|| self.cgroup_limit.saturating_sub(self.cgroup_usage));
        let basis = match (cgroup_free, self.node_available) {
            (Some(c), n) if n == UNKNOWN_BYTES || c <= n => ThresholdBasis::Cgroup,
            (_, n) if n != UNKNOWN_BYTES => ThresholdBasis::Node,
            _ => ThresholdBasis::Unknown,
        };
        (sample.available(), basis)
    }
}
