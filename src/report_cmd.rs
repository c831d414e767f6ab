//! `evenflush report`: the command-line layer over `views::report`.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Args;
use trace::Trace;
use trace::progress::Bar;
use views::callsites;
use views::report::{self, Report, ReportError};

use crate::window_args::WindowArgs;

#[derive(Args, Debug)]
#[command(
    after_help = concat!("Examples:\n  evenflush report trace\n  evenflush report trace --json > profile.json\n  \
evenflush report trace --from suspension:2 --to suspension:3 --ranks 0-7\n  \
evenflush report trace --csv > functions.csv\n  evenflush report profiles/   (a directory of profile-NNNNN.json)\n\n\
Per MPI function: calls, total/min/mean/max time, bytes min/mean/max/total and a histogram of message sizes \
in 24 power-of-two bins (bin 0 = 0-1 B, bin k = [2^k, 2^(k+1)) B, the last >= 8 MiB; calls record the bytes \
they send or their buffer; receives, waits and collectives also get a histogram of the bytes that arrived, \
where the trace tells). Then the partner matrix \
(point-to-point messages and bytes between world ranks), per rank the time in MPI versus outside between \
the end of MPI_Init and the start of MPI_Finalize, and the suspensions. Functions whose mean time is within \
3x the recorder's own mean cost per call are marked '!' (handle with care).\n\n\
With a window: the ranks in it; a call (or a run of polls) counts when its start lies in [from, to] \
(whole, even if it ends later), with the completions that followed it; the per-rank span is the part \
of the rank's span inside the window, MPI time the calls counted that started in the span, \
suspended time the part of the suspensions inside the window; the suspension table lists those that \
overlap it. Partners are sends between ranks in the window: a message to a rank outside --ranks is \
not counted (the header says how many there were). Profile directories cannot be windowed.\n\n",
crate::window_help!())
)]
pub struct ReportArgs {
    /// Trace directory (rank-*.evf, raw or reconstructed) or a directory of profile-NNNNN.json.
    pub dir: PathBuf,
    /// Print JSON: {"functions": [...], "partners": [{"source", "dest", "messages", "bytes"}, ...], "ranks": [...], "suspensions": [...], "memory": {...} or null, ...}.
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// Print the function table as CSV (histogram bins as columns).
    #[arg(long)]
    pub csv: bool,
    /// Also attribute calls, time and bytes to the places in the program that make them
    /// (traces recorded with `evenflush run --callsites`; resolved to file:line from the
    /// program's debug information, so the program must still be where it ran).
    #[arg(long, conflicts_with = "csv")]
    pub callsites: bool,
    #[command(flatten)]
    pub window: WindowArgs,
}

pub fn run(args: &ReportArgs) -> Result<()> {
    let is_profile = report::is_profile_dir(&args.dir);
    let spec = args.window.spec()?;
    if is_profile && !spec.is_everything() {
        anyhow::bail!(
            "{}: profile files hold totals only and cannot be cut to a window or ranks; record a \
             trace (--mode trace) to report on a window",
            args.dir.display()
        );
    }
    if is_profile && args.callsites {
        bail!("--callsites needs a trace directory, not profile files");
    }
    let mut cut = None;
    let mut sites = None;
    let (profiles, memory, source) = if is_profile {
        (
            report::read_profiles(&args.dir)?,
            None,
            format!("{} (profile files)", args.dir.display()),
        )
    } else {
        let trace = Trace::open(&args.dir)?;
        // The window, resolved on the trace's first pass, which its views then share.
        let windowed = if spec.is_everything() {
            None
        } else {
            let metas = trace::meta_cache::scan_cached(&trace)?;
            let window = spec.resolve(&metas, trace.world_size)?;
            Some((window, metas))
        };
        let bar = if args.json || args.csv {
            Bar::hidden()
        } else {
            Bar::for_terminal("profiling")
        };
        let mut progress = |done, _| bar.update(done, done);
        let result = match &windowed {
            None => report::profile_trace_with_memory(&trace, &mut progress),
            Some((window, metas)) => {
                let crossing =
                    reconstruct::match_index::crossing_messages_kept(&trace, metas, window)?;
                report::profile_trace_window(&trace, window, metas, &mut progress).map(
                    |(p, m, s, c)| {
                        cut = Some(report::WindowCut {
                            messages_crossing: crossing,
                            ..c
                        });
                        (p, m, s)
                    },
                )
            }
        };
        bar.finish();
        let (profiles, memory, skipped) = result.map_err(ReportError::from)?;
        for k in &skipped {
            eprintln!("evenflush: warning: {k}");
        }
        if args.callsites {
            let bar = if args.json {
                Bar::hidden()
            } else {
                Bar::for_terminal("call sites")
            };
            let result = callsites::call_sites(
                &trace,
                windowed.as_ref().map(|(w, m)| (w, m.as_slice())),
                &mut |done, _| bar.update(done, done),
            );
            bar.finish();
            sites = Some(result?);
        }
        (
            profiles,
            views::memory::job_of(&memory),
            args.dir.display().to_string(),
        )
    };
    let mut rep = Report::build(&source, &profiles);
    rep.memory = memory;
    if let Some(c) = &cut {
        eprintln!(
            "{}; {} messages crossing its edge; {} sends to ranks outside it left out of the partners",
            c.window, c.messages_crossing, c.sends_to_ranks_outside
        );
    }
    rep.window = cut;
    if args.json {
        let mut json = rep.to_json();
        if let (Some(s), Some(obj)) = (&sites, json.as_object_mut()) {
            obj.insert("callsites".into(), s.to_json());
        }
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else if args.csv {
        print!("{}", rep.to_csv());
    } else {
        print!("{}", rep.render_table());
        if let Some(s) = &sites {
            print!("{}", s.render_table(40));
        }
    }
    Ok(())
}
