//! What an MPI function does for happened-before purposes, decided by its name (the trace names
//! every function it uses; numeric ids belong to the recorder's table and may change).

/// Which ranks a collective waits for before a given rank may leave it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CollShape {
    /// Nobody leaves before everyone entered (Barrier, Allreduce, Allgather, Alltoall, ...).
    AllToAll,
    /// Non-root ranks cannot leave before the root entered (Bcast, Scatter).
    OneToAll,
    /// The root cannot leave before everyone entered (Reduce, Gather).
    AllToOne,
    /// Rank i cannot leave before ranks 0..=i entered (Scan).
    Prefix,
    /// Rank i cannot leave before ranks 0..i entered (Exscan).
    ExclusivePrefix,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FuncClass {
    /// Blocking send: the message leaves at the call's start.
    Send,
    /// Nonblocking send: the message leaves at the call's start; the request completes later.
    Isend,
    /// Blocking receive: the message is in when the call ends.
    Recv,
    /// Nonblocking receive: posted here, complete at the Wait/Test that completes its request.
    Irecv,
    /// Send at the start, receive at the end of one call.
    SendRecv,
    /// Wait*/Test*: completions of requests follow the call.
    Completion,
    Collective(CollShape),
    /// Nonblocking collective: entered here, left at the completion of its request.
    Icollective(CollShape),
    Other,
}

/// The name of an MPI function without its `MPI_`/`PMPI_` prefix, in lower case, and without the
/// `_c` of a large-count variant: `MPI_Send_c` moves messages as `MPI_Send` does, only its count
/// is wider. `None` for a name that is not MPI's.
pub fn mpi_base(name: &str) -> Option<String> {
    let base = name
        .strip_prefix("MPI_")
        .or_else(|| name.strip_prefix("PMPI_"))?;
    let mut lower = base.to_ascii_lowercase();
    if lower.ends_with("_c") {
        lower.truncate(lower.len() - 2);
    }
    Some(lower)
}

impl FuncClass {
    pub fn of(name: &str) -> FuncClass {
        let Some(lower) = mpi_base(name) else {
            return FuncClass::Other;
        };
        match lower.as_str() {
            "send" | "ssend" | "bsend" | "rsend" => return FuncClass::Send,
            "isend" | "issend" | "ibsend" | "irsend" => return FuncClass::Isend,
            "recv" => return FuncClass::Recv,
            "irecv" => return FuncClass::Irecv,
            "sendrecv" | "sendrecv_replace" => return FuncClass::SendRecv,
            "wait" | "waitall" | "waitany" | "waitsome" | "test" | "testall" | "testany"
            | "testsome" => {
                return FuncClass::Completion;
            }
            _ => {}
        }
        if let Some(shape) = collective_shape(&lower) {
            return FuncClass::Collective(shape);
        }
        if let Some(rest) = lower.strip_prefix('i')
            && let Some(shape) = collective_shape(rest)
        {
            return FuncClass::Icollective(shape);
        }
        FuncClass::Other
    }
}

/// The point-to-point calls whose message is described by another record: a persistent request's
/// `*_init` describes what each `Start` sends or receives, and a matched probe names the
/// communicator of the `Mrecv`/`Imrecv` that takes its message (see [`crate::requests`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Deferred {
    /// `Send_init`, `Bsend_init`, `Ssend_init`, `Rsend_init`.
    SendInit,
    RecvInit,
    /// `Start`, `Startall` (one record per started request).
    Start,
    Mprobe,
    /// `Improbe`: may have found nothing; the last one before an `Imrecv` found its message.
    Improbe,
    Mrecv,
    Imrecv,
}

impl Deferred {
    pub fn of(name: &str) -> Option<Deferred> {
        Some(match mpi_base(name)?.as_str() {
            "send_init" | "bsend_init" | "ssend_init" | "rsend_init" => Deferred::SendInit,
            "recv_init" => Deferred::RecvInit,
            "start" | "startall" => Deferred::Start,
            "mprobe" => Deferred::Mprobe,
            "improbe" => Deferred::Improbe,
            "mrecv" => Deferred::Mrecv,
            "imrecv" => Deferred::Imrecv,
            _ => return None,
        })
    }
}

fn collective_shape(lower: &str) -> Option<CollShape> {
    Some(match lower {
        "barrier"
        | "allreduce"
        | "allgather"
        | "allgatherv"
        | "alltoall"
        | "alltoallv"
        | "alltoallw"
        | "reduce_scatter"
        | "reduce_scatter_block" => CollShape::AllToAll,
        "bcast" | "scatter" | "scatterv" => CollShape::OneToAll,
        "reduce" | "gather" | "gatherv" => CollShape::AllToOne,
        "scan" => CollShape::Prefix,
        "exscan" => CollShape::ExclusivePrefix,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_classify() {
        assert_eq!(FuncClass::of("MPI_Send"), FuncClass::Send);
        assert_eq!(FuncClass::of("MPI_Issend"), FuncClass::Isend);
        assert_eq!(FuncClass::of("MPI_Waitall"), FuncClass::Completion);
        assert_eq!(
            FuncClass::of("MPI_Bcast"),
            FuncClass::Collective(CollShape::OneToAll)
        );
        assert_eq!(
            FuncClass::of("MPI_Iallreduce"),
            FuncClass::Icollective(CollShape::AllToAll)
        );
        assert_eq!(FuncClass::of("MPI_Init"), FuncClass::Other);
        assert_eq!(FuncClass::of("MPI_Irecv"), FuncClass::Irecv);
        assert_eq!(FuncClass::of("compute"), FuncClass::Other);
        // Large-count variants like their base.
        assert_eq!(FuncClass::of("MPI_Send_c"), FuncClass::Send);
        assert_eq!(FuncClass::of("MPI_Isend_c"), FuncClass::Isend);
        assert_eq!(FuncClass::of("MPI_Recv_c"), FuncClass::Recv);
        assert_eq!(FuncClass::of("MPI_Irecv_c"), FuncClass::Irecv);
        assert_eq!(FuncClass::of("MPI_Sendrecv_replace_c"), FuncClass::SendRecv);
        assert_eq!(
            FuncClass::of("MPI_Ibcast_c"),
            FuncClass::Icollective(CollShape::OneToAll)
        );
        assert_eq!(Deferred::of("MPI_Send_init_c"), Some(Deferred::SendInit));
        assert_eq!(Deferred::of("MPI_Startall"), Some(Deferred::Start));
        assert_eq!(Deferred::of("MPI_Imrecv_c"), Some(Deferred::Imrecv));
        assert_eq!(Deferred::of("MPI_Send"), None);
    }
}
