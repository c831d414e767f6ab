//! `evenflush export`: the command-line layer over `views::export`.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::{Args, ValueEnum};
use trace::Trace;
use trace::progress::Bar;
use views::export::perfetto_proto::{self, ProtoOptions};
use views::export::{chrome_json, otf2};

use crate::window_args::WindowArgs;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// Perfetto's native protobuf trace (deflated packets, 20-35 times smaller than the JSON):
    /// open it in ui.perfetto.dev or query it with trace_processor. `perfetto` used to write the
    /// JSON; that is `chrome-json` now.
    Perfetto,
    /// Chrome Trace Event JSON: ui.perfetto.dev, chrome://tracing, or any JSON tool.
    ChromeJson,
    /// An OTF2 archive (Score-P's format: Vampir, Scalasca, otf2-print).
    Otf2,
}

#[derive(Args, Debug)]
#[command(
    after_help = concat!("Examples:\n  evenflush export trace --format perfetto --out trace.pftrace\n  \
evenflush export trace --format perfetto --out zoom.pftrace --from 1.2 --to 2.5 --ranks 0-3\n  \
evenflush export trace --format chrome-json --out trace.json\n  \
evenflush export trace --format otf2 --out trace-otf2 && otf2-print trace-otf2/traces.otf2\n\n\
Times are in the global clock (rank 0's). perfetto and chrome-json (the same view; `perfetto` wrote this JSON \
before it wrote the native format): one process per rank (perfetto: pid = rank + 1, as Perfetto \
reserves pid 0), one thread per recording thread, each MPI call a \
slice with peer (world rank), tag, bytes and communicator, user regions as slices (perfetto), each matched \
message a flow arrow from the send call to the call that completed the receive, suspensions and flushes as \
slices, the recorder's buffer fill as a counter. OTF2: MPI point-to-point \
(blocking and nonblocking) and collective records inside a region per MPI function; suspensions as \
MeasurementOnOff. Export a reconstructed trace (evenflush reconstruct) to see the original timing.\n\n\
With a window, slices that overlap it are kept and cut to its edges; instants, counter samples and \
(perfetto) user regions that begin inside it are kept; ranks outside it are left out (OTF2 keeps \
their locations, empty, so the definitions stay whole). A matched message with one end outside the \
window keeps its arrow (perfetto, chrome-json): it goes to or from a mark on the \"outside window\" \
track, at the window's edge (or at the time of the end, for a rank outside --ranks), named e.g. \
\"→ rank 7 at 12.345678 s (outside window)\". A message end is the start of the send call and the end \
of the call that completed the receive.\n\n", crate::window_help!())
)]
pub struct ExportArgs {
    /// Trace directory (holds rank-*.evf).
    pub dir: PathBuf,
    #[arg(long, value_enum)]
    pub format: ExportFormat,
    /// Output: a file for perfetto (.pftrace) and chrome-json (.json), a directory for otf2
    /// (replaced if it holds an archive).
    #[arg(long)]
    pub out: PathBuf,
    #[command(flatten)]
    pub window: WindowArgs,
}

pub fn run(args: &ExportArgs) -> Result<()> {
    if args.format == ExportFormat::Otf2 && !otf2::AVAILABLE {
        bail!(
            "this evenflush was built without OTF2 support (the OTF2 library and headers, Debian package \
             libopen-trace-format2-dev, were not found at build time); install them and rebuild"
        );
    }
    let spec = args.window.spec()?;
    let trace = Trace::open(&args.dir)?;
    let window = if spec.is_everything() {
        trace::window::Window::everything(trace.world_size)
    } else {
        let metas = trace::meta_cache::scan_cached(&trace)?;
        spec.resolve(&metas, trace.world_size)?
    };
    let bar = Bar::for_terminal("exporting");
    let mut progress = |done, total| bar.update(done, total);
    let result = match args.format {
        ExportFormat::Perfetto => perfetto_proto::export_window(
            &trace,
            &args.out,
            ProtoOptions::default(),
            &window,
            &mut progress,
        )
        .map(|s| {
            warn_skipped(&s.skipped);
            format!(
                "wrote {}: {}; {} slices, {} flow ends ({} matched messages, {} crossing the \
                 window's edge), {} counter samples, {} packets, {} bytes ({} before compression)",
                args.out.display(),
                s.window,
                s.slices,
                s.flow_ends,
                s.messages_matched,
                s.messages_crossing,
                s.counters,
                s.packets,
                s.bytes_written,
                s.bytes_packets
            )
        }),
        ExportFormat::ChromeJson => {
            chrome_json::export_window(&trace, &args.out, &window, &mut progress).map(|s| {
                warn_skipped(&s.skipped);
                format!(
                    "wrote {}: {}; {} slices, {} message flows ({} matched messages, {} crossing \
                     the window's edge), {} counter samples",
                    args.out.display(),
                    s.window,
                    s.slices,
                    s.flows,
                    s.messages_matched,
                    s.messages_crossing,
                    s.counters
                )
            })
        }
        ExportFormat::Otf2 => otf2::export_window(&trace, &args.out, &window, &mut progress).map(|s| {
            warn_skipped(&s.skipped);
            format!(
                "wrote {}: {}; {} locations, {} events ({} MPI sends, {} receives, {} collectives, {} \
                 suspensions, {} buffer flushes), {} cut by the window (calls and suspensions outside it, all events of ranks outside it)",
                args.out.display(),
                s.window,
                s.locations,
                s.events,
                s.sends,
                s.receives,
                s.collectives,
                s.suspensions,
                s.buffer_flushes,
                s.cut
            )
        }),
    };
    bar.finish();
    let line = result?;
    eprintln!("{line}");
    Ok(())
}

/// What the reader could not read is said on stderr, once per range, as the other commands do.
pub fn warn_skipped(skipped: &[trace::Skipped]) {
    for k in skipped {
        eprintln!("evenflush: warning: {k}");
    }
}
