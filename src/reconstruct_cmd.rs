//! `evenflush reconstruct`: the command-line layer over `reconstruct::rebuild`.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::{Args, ValueEnum};
use reconstruct::rebuild::{self, Model, Options, RebuildError, Remove};
use trace::Trace;
use trace::progress::Bar;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RemoveArg {
    /// The equalised suspensions (DP'): recovers the traced run without offload, T(G+).
    Dpprime,
    /// The recorder's own per-event cost (DP) only.
    Dp,
    /// Both: recovers the untraced run, T(G).
    Both,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ModelArg {
    /// The paper's: DP' and DP subtracted rank by rank; waits stay as recorded.
    Subtract,
    /// Waits recomputed from the partners (matched send, last entrant of a collective), with
    /// intrinsic costs and transfer times learned from the run itself; removes DP' and DP.
    Replay,
}

#[derive(Args, Debug)]
#[command(after_help = concat!(
    "Example:\n  evenflush reconstruct trace --out trace.reconstructed --remove both --hb --json\n\n",
    "As an MPI job (Open MPI or MPICH; every process must see the trace and the output directory):\n",
    "  mpirun -np 4 evenflush reconstruct trace --out trace.reconstructed --threads 1\n",
    "Each process reads, maps, matches and writes an equal block of the ranks, with every model and with --hb, ",
    "exchanging with the others only what their ranks' matching needs; process 0 prints the summary. A trace ",
    "with multi-threaded ranks, RMA windows or intercommunicators is matched by process 0 for all (which then also ",
    "writes every file with --hb or the replay). The output is byte-identical to one process's.\n\n",
    "Exit codes: 0 success; 1 error; 2 bad usage; 3 damaged or missing trace (unreadable rank file, missing rank, ",
    "wrong format version, empty directory). Damage that still leaves complete chunks is not fatal: the command ",
    "goes on and warns, naming the file and byte offset of what it skipped."
))]
pub struct ReconstructArgs {
    /// Trace directory (holds rank-*.evf and meta.json).
    pub dir: PathBuf,
    /// Where to write the reconstructed trace [default: DIR.reconstructed].
    #[arg(long, value_name = "DIR2")]
    pub out: Option<PathBuf>,
    /// What to remove [default: dpprime; with --model replay: both, the only choice].
    #[arg(long, value_enum)]
    pub remove: Option<RemoveArg>,
    /// How waits are reconstructed.
    #[arg(long, value_enum, default_value = "subtract")]
    pub model: ModelArg,
    /// Repair happened-before violations (receives ending before their send started, ranks leaving
    /// a collective before another entered) by shifting later events forward: a receive then ends
    /// at least 100 ns after its send started, and a shift is given back at the lane's next wait
    /// that had room for it.
    #[arg(long)]
    pub hb: bool,
    /// Print the summary as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Threads to read, map and write on [default: every core]. The output is the same for any
    /// number.
    #[arg(long, value_name = "N", default_value_t = 0, hide_default_value = true)]
    pub threads: usize,
    /// With --hb or the replay: match the written output once more to count the violations
    /// left in it, instead of taking the count the reconstruction made as it wrote, and fail if
    /// the two differ.
    #[arg(long)]
    pub verify: bool,
}

/// `DIR.reconstructed` next to `DIR`.
pub fn default_out(dir: &Path) -> PathBuf {
    let mut name = dir
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_else(|| "trace".into());
    name.push(".reconstructed");
    dir.with_file_name(name)
}

pub fn run(args: &ReconstructArgs) -> Result<()> {
    let dir = args.dir.as_path();
    let json = args.json;
    let (remove, model) = match (args.model, args.remove) {
        (ModelArg::Subtract, r) => (r.unwrap_or(RemoveArg::Dpprime), Model::Subtract),
        (ModelArg::Replay, None | Some(RemoveArg::Both)) => (RemoveArg::Both, Model::Replay),
        (ModelArg::Replay, Some(other)) => anyhow::bail!(
            "--model replay removes both DP' and DP (its bursts are measured without either); \
             --remove {} is for --model subtract",
            other
                .to_possible_value()
                .map_or_else(String::new, |v| v.get_name().to_string())
        ),
    };
    let trace = Trace::open(dir)?;
    let out = args.out.clone().unwrap_or_else(|| default_out(dir));
    let opts = Options {
        remove: match remove {
            RemoveArg::Dpprime => Remove::DpPrime,
            RemoveArg::Dp => Remove::Dp,
            RemoveArg::Both => Remove::Both,
        },
        model,
        hb: args.hb,
        threads: args.threads,
        verify: args.verify,
        ..Options::default()
    };
    // Under `mpirun -np N` (N > 1) the processes share the work (reconstruct::job); process 0
    // prints what one process would.
    let job = match crate::mpi_job::launched_by() {
        Some(mpi) => Some(crate::mpi_job::MpiJob::start(mpi)?),
        None => None,
    };
    let transport = job.as_ref().map(|j| j as &dyn reconstruct::job::Transport);
    let me = transport.map_or(0, |t| t.rank());
    let bar = if json || me != 0 {
        Bar::hidden()
    } else {
        Bar::for_terminal("reconstructing")
    };
    let result = rebuild::reconstruct_in_job(&trace, &out, &opts, transport, &mut |done, total| {
        bar.update(done, total)
    });
    bar.finish();
    let summary = result.map_err(|e| match e {
        // Trace damage keeps its type so the caller can map it to exit code 3.
        RebuildError::Trace(t) => anyhow::Error::new(t),
        other => anyhow::Error::new(other),
    });
    let summary = match summary {
        Ok(Some(s)) => s,
        // Another process's part is done; process 0 reports for the job.
        Ok(None) => return Ok(()),
        // An owner reports what fails in its part to process 0; an error here means the two
        // cannot talk, so process 0 would wait for it forever: end the whole job.
        Err(e) if me != 0 => {
            eprintln!("evenflush: process {me} of the MPI job: {e:#}");
            match &job {
                Some(j) => j.abort(1),
                None => return Err(e),
            }
        }
        Err(e) => return Err(e),
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print!("{}", rebuild::render_table(&summary));
    }
    for w in &summary.warnings {
        eprintln!("evenflush: warning: {w}");
    }
    for k in &summary.skipped {
        eprintln!("evenflush: warning: {k}");
    }
    Ok(())
}
