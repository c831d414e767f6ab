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

impl FuncClass {
    pub fn of(name: &str) -> FuncClass {
        let Some(base) = name
            .strip_prefix("MPI_")
            .or_else(|| name.strip_prefix("PMPI_"))
        else {
            return FuncClass::Other;
        };
        let lower = base.to_ascii_lowercase();
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
    }
}
