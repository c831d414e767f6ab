//! Which MPI implementation a harness job runs under, and the commands that belong to each: the
//! swap experiment's launcher and validate's compiler wrapper.

/// The MPI implementation of an experiment's job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum MpiImpl {
    Openmpi,
    Mpich,
}

impl MpiImpl {
    pub fn name(self) -> &'static str {
        match self {
            MpiImpl::Openmpi => "openmpi",
            MpiImpl::Mpich => "mpich",
        }
    }

    pub fn default_launcher(self) -> &'static str {
        match self {
            MpiImpl::Openmpi => "mpirun",
            MpiImpl::Mpich => "mpirun.mpich",
        }
    }

    /// Launcher flags placing one rank per core: Open MPI binds 2 ranks to cores by default but
    /// refuses more ranks than cores without `--oversubscribe`; MPICH's launcher binds nothing
    /// unless asked.
    pub fn launcher_flags(self) -> &'static [&'static str] {
        match self {
            MpiImpl::Openmpi => &["--oversubscribe"],
            MpiImpl::Mpich => &["-bind-to", "core"],
        }
    }

    /// The C compiler wrapper of this MPI under a name only it has (a bare `mpicc` may be the
    /// other one's), so a preload built with it matches the job's ABI.
    pub fn compiler(self) -> &'static str {
        match self {
            MpiImpl::Openmpi => "mpicc.openmpi",
            MpiImpl::Mpich => "mpicc.mpich",
        }
    }
}
