//! `--from`, `--to` and `--ranks`: one definition for every view (`export`, `report`, `compare`,
//! `timeline`), flattened into each command's arguments. The concept itself lives in
//! `trace::window`.

use anyhow::Result;
use clap::Args;
use trace::window::WindowSpec;

/// The paragraph every windowed command's `--help` ends with.
#[macro_export]
macro_rules! window_help {
    () => {
        "Windows: --from and --to take seconds since the start of the run (the earliest end of \
MPI_Init over its ranks, global clock) or suspension:N, the suspension with sequence number N as \
the trace numbers them (from 0, the `seq` the views show). --from suspension:N starts the window \
where suspension N ended on its last rank, --to suspension:N ends it where suspension N began on \
its first rank, so the window between two suspensions holds neither pause. With only one of them, \
the other is the start of the run or the latest start of MPI_Finalize; with neither, all time is \
kept (the timeline draws the start of the run to the latest start of MPI_Finalize). --ranks takes \
world ranks, e.g. 0-15,32; a rank not in the trace, an unknown suspension, or --from not before \
--to is an error. A message with one end inside the window (in time and rank) and the other \
outside crosses its edge: the summary counts them."
    };
}

#[derive(Args, Debug, Clone, Default)]
pub struct WindowArgs {
    /// Window start: seconds since the start of the run, or suspension:N (where suspension N
    /// ended).
    #[arg(long, value_name = "S|suspension:N", allow_hyphen_values = true)]
    pub from: Option<String>,
    /// Window end: seconds since the start of the run, or suspension:N (where suspension N
    /// began).
    #[arg(long, value_name = "S|suspension:N", allow_hyphen_values = true)]
    pub to: Option<String>,
    /// World ranks to keep, e.g. `0-15,32` [default: all].
    #[arg(long, value_name = "LIST")]
    pub ranks: Option<String>,
}

impl WindowArgs {
    pub fn spec(&self) -> Result<WindowSpec> {
        Ok(WindowSpec::parse(
            self.from.as_deref(),
            self.to.as_deref(),
            self.ranks.as_deref(),
        )?)
    }
}
