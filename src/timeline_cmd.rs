//! `evenflush timeline`: the command-line layer over `views::export::timeline`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use trace::Trace;
use trace::progress::Bar;
use views::export::timeline::{self, TimelineOptions};

use crate::window_args::WindowArgs;

#[derive(Args, Debug)]
#[command(after_help = concat!("Examples:\n  evenflush timeline trace --png run.png\n  \
evenflush timeline trace --png zoom.png --from 0.010 --to 0.012 --ranks 0-3,7\n  \
evenflush timeline trace --png between.png --from suspension:2 --to suspension:3\n  \
evenflush timeline trace --png original.png --reconstructed\n\n\
Ranks are rows, time runs left to right in seconds since the earliest end of MPI_Init (global clock). \
MPI calls are coloured by kind (point-to-point send, receive, wait/test, collective, other); where a pixel \
column holds several calls it takes the colour of the kind covering most of it, fainter the less of it is \
MPI. Arrows go from each matched send to the end of the call that completed its receive; suspensions are \
shaded. A message with one end outside the window (in time, or on a rank not drawn) is a magenta \
line from its end inside to a square at the picture's edge (or at the top of the row for a rank \
not drawn); rows follow the order --ranks gives. Needs the DejaVu font (Debian \
package fonts-dejavu-core).\n\n", crate::window_help!()))]
pub struct TimelineArgs {
    /// Trace directory (holds rank-*.evf).
    pub dir: PathBuf,
    /// The PNG file to write.
    #[arg(long)]
    pub png: PathBuf,
    #[command(flatten)]
    pub window: WindowArgs,
    /// Remove the suspensions from the time axis (the timing `evenflush reconstruct` recovers).
    #[arg(long)]
    pub reconstructed: bool,
    /// Picture width in pixels.
    #[arg(long, default_value_t = 1600)]
    pub width: u32,
}

pub fn run(args: &TimelineArgs) -> Result<()> {
    let opts = TimelineOptions {
        window: args.window.spec()?,
        reconstructed: args.reconstructed,
        width: args.width,
        ..TimelineOptions::default()
    };
    let trace = Trace::open(&args.dir)?;
    let bar = Bar::for_terminal("drawing");
    let result = timeline::render(&trace, &args.png, &opts, &mut |d, t| bar.update(d, t));
    bar.finish();
    let s = result?;
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
        "wrote {} ({}x{}): {}; {} calls, {} of {} messages drawn, {} crossing the window's edge \
         ({} drawn to edge marks), {} suspensions{memory}",
        args.png.display(),
        s.width,
        s.height,
        s.window,
        s.calls_in_window,
        s.arrows_drawn,
        s.messages_in_window,
        s.messages_crossing,
        s.edge_arrows_drawn,
        s.suspensions_in_window
    );
    Ok(())
}
