//! `evenflush compare`: the command-line layer over `views::compare`.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Args;
use trace::Trace;
use views::compare::{self, CompareError, Options, Tolerance};

use crate::window_args::WindowArgs;

#[derive(Args, Debug)]
#[command(after_help = concat!(
    "Examples:\n",
    "  evenflush compare reference-run offload-run.reconstructed --json\n",
    "  evenflush compare ref1 ref2 ref3 offload-run.reconstructed --tolerance 5%\n",
    "  evenflush compare ref run --from 2.0 --to 4.0 --ranks 0-7\n\n",
    "The last trace is the run judged; every one before it (and each --reference) is a reference. ",
    "The detailed figures are against the first reference. With two or more references the noise ",
    "floor is printed beside them: the same figures between the references, and whether the run is ",
    "beyond it against every reference.\n\n",
    "A call is within tolerance when |duration in RUN − duration in REF| is at most --tolerance of ",
    "the reference call's duration, or --tolerance-floor for short calls. Bias is the signed ",
    "difference RUN − REF: positive when the run's calls last longer.\n\n",
    "With a window (resolved on the run judged, RUN): a pair of calls counts when RUN's call starts ",
    "in [from, to] on a rank in --ranks; calls are still aligned over the whole runs. Between two ",
    "references the same seconds since the start apply to the later one. The totals (span, total ",
    "error) stay the whole runs'.\n\n",
    "Exit codes: 0 success; 1 error (including two runs that are not the same program); 2 bad usage; ",
    "3 damaged or missing trace.\n\n",
    crate::window_help!()
))]
pub struct CompareArgs {
    /// Reference traces (e.g. runs without offload), then the run to judge (e.g. a reconstructed
    /// offload run), last.
    #[arg(required = true, num_args = 1.., value_name = "REF... RUN")]
    pub traces: Vec<PathBuf>,
    /// A further reference trace (may be repeated); added after the positional references.
    #[arg(long, value_name = "DIR")]
    pub reference: Vec<PathBuf>,
    /// Allowed |duration difference| per call, in percent of the reference call's duration.
    #[arg(long, default_value = "5%", value_parser = parse_percent, value_name = "PCT")]
    pub tolerance: f64,
    /// The least allowed |duration difference| (e.g. 1us, 500ns), for calls too short for the
    /// relative tolerance to mean anything.
    #[arg(long, default_value = "1us", value_parser = parse_floor, value_name = "DURATION")]
    pub tolerance_floor: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub window: WindowArgs,
}

/// `5%` or `5` → 0.05.
fn parse_percent(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let number = t.strip_suffix('%').unwrap_or(t).trim();
    let v: f64 = number
        .parse()
        .map_err(|_| format!("{t:?} is not a percentage (e.g. 5%)"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("{t:?}: the tolerance must be 0 % or more"));
    }
    Ok(v / 100.0)
}

fn parse_floor(text: &str) -> Result<u64, String> {
    let d = offload::config::parse_duration(text)?;
    u64::try_from(d.as_nanos()).map_err(|_| format!("{text:?} is too long"))
}

pub fn run(args: &CompareArgs) -> Result<()> {
    let (run, positional_refs) = args
        .traces
        .split_last()
        .expect("clap requires at least one trace");
    let references: Vec<&PathBuf> = positional_refs.iter().chain(&args.reference).collect();
    if references.is_empty() {
        bail!("compare needs a reference run: `evenflush compare REF [REF...] RUN`");
    }
    let spec = args.window.spec()?;
    let references = references
        .into_iter()
        .map(Trace::open)
        .collect::<Result<Vec<_>, _>>()?;
    let run = Trace::open(run)?;
    let (window, crossing) = if spec.is_everything() {
        (None, 0)
    } else {
        let metas = trace::meta_cache::scan_cached(&run)?;
        let window = spec.resolve(&metas, run.world_size)?;
        let crossing = reconstruct::match_index::crossing_messages_kept(&run, &metas, &window)?;
        (Some(window), crossing)
    };
    let opts = Options {
        tolerance: Tolerance {
            relative: args.tolerance,
            floor_ns: args.tolerance_floor,
        },
        window,
    };
    let report = compare::compare_runs(&references, &run, &opts).map_err(|e| match e {
        CompareError::Trace(t) => anyhow::Error::new(t),
        other => anyhow::Error::new(other),
    })?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", compare::render_table(&report));
    }
    if let Some(w) = &report.window {
        eprintln!(
            "{w}: {} calls compared; {crossing} messages of RUN crossing its edge",
            report.calls
        );
    }
    for k in &report.skipped {
        eprintln!("evenflush: warning: {k}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerances_parse_as_people_write_them() {
        assert_eq!(parse_percent("5%"), Ok(0.05));
        assert_eq!(parse_percent("2.5"), Ok(0.025));
        assert!(parse_percent("-1%").is_err());
        assert!(parse_percent("five").is_err());
        assert_eq!(parse_floor("1us"), Ok(1_000));
        assert_eq!(parse_floor("500ns"), Ok(500));
    }
}
