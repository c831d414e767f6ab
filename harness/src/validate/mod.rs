//! `evenflush validate`: the tool's proof on the user's own program. It runs the program K times
//! untraced and K times traced, interleaved (U T U T ...), reconstructs each traced run, and says
//! how far the reconstructed time is from the untraced time, against the untraced run-to-run
//! spread.
//!
//! Both sides measure the same interval: "end of `MPI_Init` to start of `MPI_Finalize`, the
//! longest over ranks", which is the span reconstruction reports. Untraced runs get it from a
//! tiny preload (`span_probe.c`, built here with the MPI's own compiler wrapper) that reads the
//! clock at those two points and nothing else. Traced runs go through `evenflush run` (this
//! process's own executable); how a launch line hands settings to the ranks is the CLI's knowledge,
//! lent through [`Launcher`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use reconstruct::rebuild::{self, Options};
use serde::Serialize;
use trace::Trace;
use trace::progress::Bar;
use views::info;

use crate::mpi::MpiImpl;

pub mod plot;

const PROBE_SOURCE: &str = include_str!("span_probe.c");

/// One interleaved pair.
#[derive(Clone, Debug, Serialize)]
pub struct Pair {
    pub untraced_s: f64,
    /// T(G'): the traced run's span as measured.
    pub traced_s: f64,
    /// T(G+): DP' removed.
    pub reconstructed_plus_s: f64,
    /// T(G): DP' and DP removed.
    pub reconstructed_s: f64,
    /// T(G) with the happened-before repair (`reconstruct --remove both --hb`): where a rank's
    /// recorder cost was absorbed by a wait for another rank, removing it must not shorten the
    /// wait below what the other rank allows, and the repair puts that wait back.
    pub reconstructed_causal_s: f64,
    /// T(G) by replay (`reconstruct --model replay`): every wait recomputed from its partners.
    pub reconstructed_replay_s: f64,
    pub dp_prime_s: f64,
    pub dp_s: f64,
    /// Of `dp_s`, the recorder's clock reads (`reconstruct::Summary::dp_reads_s`).
    pub dp_reads_s: f64,
    pub flushes: u64,
    /// The most CPUs a rank of the untraced run was allowed to run on (its affinity, read by the
    /// probe; 0 if unknown): 1 when the launcher bound every rank to a core.
    pub cpus_per_rank: u32,
    /// Why this run's T(G) may not be reliable (oversubscribed hosts, DP beyond what recording
    /// costs).
    pub unreliable: Vec<String>,
}

/// A relative error against the untraced median, with a 95 % bootstrap interval.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Error {
    pub median_s: f64,
    /// (median − untraced median) / untraced median.
    pub error: f64,
    pub ci_low: f64,
    pub ci_high: f64,
    /// The interval includes 0: the error cannot be told apart from the run-to-run noise.
    pub within_noise: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct Validation {
    pub command: Vec<String>,
    pub mpi: &'static str,
    pub reps: usize,
    pub definition: &'static str,
    pub untraced_median_s: f64,
    /// Median relative difference of consecutive untraced runs: the noise floor.
    pub untraced_spread: f64,
    /// T(G'), the traced program as measured: the recorder's overhead.
    pub traced: Error,
    pub reconstructed_plus: Error,
    pub reconstructed: Error,
    pub reconstructed_causal: Error,
    pub reconstructed_replay: Error,
    pub dp_prime_median_s: f64,
    pub dp_median_s: f64,
    pub dp_reads_median_s: f64,
    /// The clock reads in DP against the untraced time: where the program's own work between
    /// calls hides them, T(G) comes out low by up to this (0 when the trace does not record
    /// what a read costs).
    pub reads_share: f64,
    pub flushes_median: u64,
    /// The most CPUs any rank could run on, over the untraced runs (see `Pair::cpus_per_rank`).
    pub cpus_per_rank: u32,
    /// Why T(G) may not be reliable, over every traced run (see `Pair::unreliable`).
    pub unreliable: Vec<String>,
    pub pairs: Vec<Pair>,
}

pub struct Request {
    pub command: Vec<String>,
    pub mpi: Option<MpiImpl>,
    pub reps: usize,
    /// Where runs, traces and the probe go; kept afterwards only with `keep`.
    pub work: PathBuf,
    pub keep: bool,
    /// `EVENFLUSH_*` settings for the traced runs.
    pub settings: BTreeMap<String, String>,
}

/// What validate takes from `evenflush run`'s launcher, so that an untraced run starts exactly as
/// a traced one does.
pub trait Launcher {
    /// The MPI `command` runs under, when `--mpi` did not say.
    fn detect_mpi(&self, command: &[String]) -> Result<MpiImpl>;
    /// `command` with `env` handed to every rank through the launcher's own option.
    fn with_rank_env(
        &self,
        mpi: MpiImpl,
        command: &[String],
        env: &BTreeMap<String, String>,
    ) -> Vec<String>;
}

pub const DEFINITION: &str = "end of MPI_Init to start of MPI_Finalize, longest over ranks";

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Ratio of medians − 1 with a percentile bootstrap over resampled pairs (a fixed seed, so that a
/// report can be reproduced from its runs).
fn error_of(untraced: &[f64], measured: &[f64]) -> Error {
    let base = median(untraced);
    let m = median(measured);
    let n = untraced.len();
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut samples = Vec::with_capacity(2000);
    for _ in 0..2000 {
        let (mut u, mut t) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for _ in 0..n {
            let i = (next() % n as u64) as usize;
            let j = (next() % n as u64) as usize;
            u.push(untraced[i]);
            t.push(measured[j]);
        }
        samples.push(median(&t) / median(&u) - 1.0);
    }
    samples.sort_by(f64::total_cmp);
    let (lo, hi) = (samples[50], samples[1949]);
    Error {
        median_s: m,
        error: m / base - 1.0,
        ci_low: lo,
        ci_high: hi,
        within_noise: lo <= 0.0 && 0.0 <= hi,
    }
}

/// Builds the span probe for `mpi` into `dir` with the MPI's compiler wrapper.
fn build_probe(mpi: MpiImpl, dir: &Path) -> Result<PathBuf> {
    let src = dir.join("span_probe.c");
    let lib = dir.join(format!("span_probe_{}.so", mpi.name()));
    std::fs::write(&src, PROBE_SOURCE)?;
    let cc = mpi.compiler();
    let out = Command::new(cc)
        .args(["-O2", "-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .output()
        .with_context(|| format!("cannot run {cc} to build the untraced runs' clock probe"))?;
    if !out.status.success() {
        bail!(
            "{cc} could not build the clock probe:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(lib)
}

fn run_quiet(argv: &[String], env: &BTreeMap<String, String>, what: &str) -> Result<()> {
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .envs(env)
        .output()
        .with_context(|| format!("cannot start `{}`", argv[0]))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

fn untraced_once(
    req: &Request,
    launcher: &dyn Launcher,
    mpi: MpiImpl,
    probe: &Path,
    rep: usize,
) -> Result<(f64, u32)> {
    let span_file = req.work.join(format!("untraced-{rep}.span"));
    let _ = std::fs::remove_file(&span_file);
    let mut env = BTreeMap::new();
    env.insert("LD_PRELOAD".to_string(), probe.display().to_string());
    env.insert(
        "EVENFLUSH_SPAN_FILE".to_string(),
        span_file.display().to_string(),
    );
    let argv = launcher.with_rank_env(mpi, &req.command, &env);
    run_quiet(&argv, &env, &format!("untraced run {rep}"))?;
    let text = std::fs::read_to_string(&span_file).with_context(|| {
        format!(
            "untraced run {rep} wrote no span ({}): the program must call MPI_Init and \
             MPI_Finalize from C (or C++)",
            span_file.display()
        )
    })?;
    let mut lines = text.lines();
    let span = lines
        .next()
        .unwrap_or("")
        .trim()
        .parse()
        .with_context(|| format!("bad span {text:?}"))?;
    let cpus = lines
        .find_map(|l| l.strip_prefix("cpus "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    Ok((span, cpus))
}

fn traced_once(req: &Request, mpi: MpiImpl, rep: usize) -> Result<Pair> {
    let trace = req.work.join(format!("traced-{rep}"));
    let rebuilt = req.work.join(format!("traced-{rep}.rebuilt"));
    for d in [&trace, &rebuilt] {
        let _ = std::fs::remove_dir_all(d);
    }
    let exe = std::env::current_exe()?;
    let mut argv = vec![
        exe.display().to_string(),
        "run".into(),
        "--mpi".into(),
        mpi.name().into(),
        "--out".into(),
        trace.display().to_string(),
        "--".into(),
    ];
    argv.extend(req.command.iter().cloned());
    let mut env = req.settings.clone();
    env.remove("EVENFLUSH_OUT");
    run_quiet(&argv, &env, &format!("traced run {rep}"))?;
    let t = Trace::open(&trace)?;
    let summary = rebuild::reconstruct(&t, &rebuilt, &Options::default(), &mut |_, _| {})?;
    let causal = rebuild::reconstruct(
        &t,
        &rebuilt,
        &Options {
            remove: rebuild::Remove::Both,
            hb: true,
            ..Options::default()
        },
        &mut |_, _| {},
    )?;
    let replay = rebuild::reconstruct(
        &t,
        &rebuilt,
        &Options {
            remove: rebuild::Remove::Both,
            model: rebuild::Model::Replay,
            ..Options::default()
        },
        &mut |_, _| {},
    )?;
    let flushes = info::summarize(&t)?.suspension.flushes;
    if !req.keep {
        let _ = std::fs::remove_dir_all(&trace);
        let _ = std::fs::remove_dir_all(&rebuilt);
    }
    Ok(Pair {
        untraced_s: 0.0,
        traced_s: summary.measured_s,
        reconstructed_plus_s: summary.reconstructed_plus_s,
        reconstructed_s: summary.reconstructed_s,
        reconstructed_causal_s: causal.reconstructed_s,
        reconstructed_replay_s: replay.reconstructed_s,
        unreliable: replay.unreliable.clone(),
        dp_prime_s: summary.dp_prime_s,
        dp_s: summary.dp_s,
        dp_reads_s: summary.dp_reads_s,
        flushes,
        cpus_per_rank: 0,
    })
}

pub fn validate(req: &Request, launcher: &dyn Launcher) -> Result<Validation> {
    if req.reps < 2 {
        bail!("--reps must be at least 2 (the noise floor needs two untraced runs)");
    }
    let mpi = match req.mpi {
        Some(m) => m,
        None => launcher.detect_mpi(&req.command)?,
    };
    std::fs::create_dir_all(&req.work)
        .with_context(|| format!("cannot create {}", req.work.display()))?;
    let probe = build_probe(mpi, &req.work)?;
    let bar = Bar::for_terminal("validating");
    let mut pairs = Vec::new();
    for rep in 0..req.reps {
        bar.update(rep as u64, req.reps as u64);
        let (untraced_s, cpus_per_rank) = untraced_once(req, launcher, mpi, &probe, rep)?;
        let mut pair = traced_once(req, mpi, rep)?;
        pair.untraced_s = untraced_s;
        pair.cpus_per_rank = cpus_per_rank;
        pairs.push(pair);
    }
    bar.update(req.reps as u64, req.reps as u64);
    bar.finish();
    let col = |f: fn(&Pair) -> f64| pairs.iter().map(f).collect::<Vec<f64>>();
    let u = col(|p| p.untraced_s);
    let base = median(&u);
    let spread = median(
        &u.windows(2)
            .map(|w| (w[1] - w[0]).abs() / base)
            .collect::<Vec<_>>(),
    );
    let reads_median = median(&col(|p| p.dp_reads_s));
    let mut flushes: Vec<u64> = pairs.iter().map(|p| p.flushes).collect();
    flushes.sort_unstable();
    Ok(Validation {
        command: req.command.clone(),
        mpi: mpi.name(),
        reps: req.reps,
        definition: DEFINITION,
        untraced_median_s: base,
        untraced_spread: spread,
        traced: error_of(&u, &col(|p| p.traced_s)),
        reconstructed_plus: error_of(&u, &col(|p| p.reconstructed_plus_s)),
        reconstructed: error_of(&u, &col(|p| p.reconstructed_s)),
        reconstructed_causal: error_of(&u, &col(|p| p.reconstructed_causal_s)),
        reconstructed_replay: error_of(&u, &col(|p| p.reconstructed_replay_s)),
        dp_prime_median_s: median(&col(|p| p.dp_prime_s)),
        dp_median_s: median(&col(|p| p.dp_s)),
        dp_reads_median_s: reads_median,
        reads_share: reads_median / base,
        flushes_median: flushes[flushes.len() / 2],
        cpus_per_rank: pairs.iter().map(|p| p.cpus_per_rank).max().unwrap_or(0),
        unreliable: {
            let mut all: Vec<String> = pairs.iter().flat_map(|p| p.unreliable.clone()).collect();
            all.sort();
            all.dedup();
            all
        },
        pairs,
    })
}

pub fn render(v: &Validation) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let pct = |x: f64| 100.0 * x;
    let _ = writeln!(
        o,
        "{} interleaved pairs ({}); time = {}",
        v.reps, v.mpi, v.definition
    );
    let _ = writeln!(
        o,
        "untraced          median {:.4} s; run-to-run spread (noise floor) {:.2} %",
        v.untraced_median_s,
        pct(v.untraced_spread)
    );
    for (name, e) in [
        ("traced T(G')", &v.traced),
        ("T(G+) DP' out", &v.reconstructed_plus),
        ("T(G) DP', DP out", &v.reconstructed),
        ("T(G) + hb repair", &v.reconstructed_causal),
        ("T(G) by replay", &v.reconstructed_replay),
    ] {
        let _ = writeln!(
            o,
            "{name:<17} median {:.4} s; {:+.2} % of untraced (95 % CI {:+.2} .. {:+.2} %){}",
            e.median_s,
            pct(e.error),
            pct(e.ci_low),
            pct(e.ci_high),
            if e.within_noise {
                ", not distinguishable from noise"
            } else {
                ""
            }
        );
    }
    let _ = writeln!(
        o,
        "DP' median {:.4} s, DP median {:.4} s, flushes median {}",
        v.dp_prime_median_s, v.dp_median_s, v.flushes_median
    );
    if v.reads_share > 0.0 {
        let _ = writeln!(
            o,
            "of DP, clock reads median {:.4} s, {:.2} % of untraced: where the program's own work \
             between calls hides them, T(G) is low by up to this",
            v.dp_reads_median_s,
            pct(v.reads_share)
        );
    }
    for w in &v.unreliable {
        let _ = writeln!(o, "UNRELIABLE: {w}");
    }
    if v.cpus_per_rank > 1 {
        // Measured on the test guard's program (paper-notes/fidelity.md, "its ranks are now
        // bound"): unbound MPICH ranks sleep through the pauses, and the work after them runs
        // slower than any model sees.
        let _ = writeln!(
            o,
            "NOTE: the ranks were not bound to one core each (a rank could run on up to {} \
             CPUs). Unbound ranks sleep through the pauses and the work after a pause can run \
             slower, which no model removes: with frequent flushes T(G) can come out a few per \
             cent slow. Bind them as a batch job does (mpirun.mpich -bind-to core, mpirun \
             --bind-to core, srun --cpu-bind=cores).",
            v.cpus_per_rank
        );
    }
    o
}
