//! `evenflush timeline`: the command-line layer over `reconstruct::export::timeline`.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use reconstruct::Trace;
use reconstruct::export::ExportError;
use reconstruct::export::timeline::{self, TimelineOptions};
use reconstruct::progress::Bar;

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  evenflush timeline trace --png run.png\n  \
evenflush timeline trace --png zoom.png --from 0.010 --to 0.012 --ranks 0-3,7\n  \
evenflush timeline trace --png original.png --reconstructed\n\n\
Ranks are rows, time runs left to right in seconds since the earliest end of MPI_Init (global clock). \
MPI calls are coloured by kind (point-to-point send, receive, wait/test, collective, other); where a pixel \
column holds several calls it takes the colour of the kind covering most of it, fainter the less of it is \
MPI. Arrows go from each matched send to the end of the call that completed its receive; suspensions are \
shaded. Needs the DejaVu font (Debian package fonts-dejavu-core).")]
pub struct TimelineArgs {
    /// Trace directory (holds rank-*.evf).
    pub dir: PathBuf,
    /// The PNG file to write.
    #[arg(long)]
    pub png: PathBuf,
    /// Window start, seconds since the end of MPI_Init [default: 0].
    #[arg(long, value_name = "S")]
    pub from: Option<f64>,
    /// Window end, seconds since the end of MPI_Init [default: the start of MPI_Finalize].
    #[arg(long, value_name = "S")]
    pub to: Option<f64>,
    /// Ranks to draw, e.g. `0-3,6` [default: all].
    #[arg(long, value_name = "LIST")]
    pub ranks: Option<String>,
    /// Remove the suspensions from the time axis (the timing `evenflush reconstruct` recovers).
    #[arg(long)]
    pub reconstructed: bool,
    /// Picture width in pixels.
    #[arg(long, default_value_t = 1600)]
    pub width: u32,
}

/// Parses `0-3,6,8-9` into ranks, in the order given.
pub fn parse_ranks(list: &str) -> Result<Vec<u32>> {
    let mut out = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let a: u32 = a
                    .trim()
                    .parse()
                    .with_context(|| format!("bad rank range '{part}'"))?;
                let b: u32 = b
                    .trim()
                    .parse()
                    .with_context(|| format!("bad rank range '{part}'"))?;
                if b < a {
                    bail!("bad rank range '{part}': end before start");
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().with_context(|| format!("bad rank '{part}'"))?),
        }
    }
    if out.is_empty() {
        bail!("--ranks names no rank");
    }
    Ok(out)
}

pub fn run(args: &TimelineArgs) -> Result<()> {
    let opts = TimelineOptions {
        from_s: args.from,
        to_s: args.to,
        ranks: args.ranks.as_deref().map(parse_ranks).transpose()?,
        reconstructed: args.reconstructed,
        width: args.width,
        ..TimelineOptions::default()
    };
    let trace = Trace::open(&args.dir)?;
    let bar = Bar::for_terminal("drawing");
    let result = timeline::render(&trace, &args.png, &opts, &mut |d, t| bar.update(d, t));
    bar.finish();
    let s = result.map_err(|e| match e {
        ExportError::Trace(t) => anyhow::Error::new(t),
        other => anyhow::Error::new(other),
    })?;
    crate::export_cmd::warn_skipped(&s.skipped);
    let memory = if s.memory_samples_in_window + s.memory_low_in_window > 0 {
        format!(
            ", {} memory samples, {} memory-low warnings",
            s.memory_samples_in_window, s.memory_low_in_window
        )
    } else {
        String::new()
    };
    eprintln!(
        "wrote {} ({}x{}): {} ranks, {:.6}-{:.6} s, {} calls, {} of {} messages drawn, {} suspensions{memory}",
        args.png.display(),
        s.width,
        s.height,
        s.ranks.len(),
        s.from_s,
        s.to_s,
        s.calls_in_window,
        s.arrows_drawn,
        s.messages_in_window,
        s.suspensions_in_window
    );
    Ok(())
}
