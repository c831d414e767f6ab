//! `--from`/`--to`/`--ranks` on every view (`report`, `export` perfetto/chrome-json/otf2,
//! `compare`, `timeline`) on real `mpirun` jobs under Open MPI and MPICH: each windowed figure is
//! checked against the same figure computed here from the whole run's Perfetto export
//! (decoded by tests/perfetto_decode.py), so a window that cuts wrongly, counts a call twice or
//! loses a crossing message fails.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Output};

use common::{Mpi, mpi_lock, run_traced, scratch};
use serde_json::Value;

fn evenflush(args: &[&str], dir: &Path, extra: &[&str]) -> Output {
    Command::new(common::evenflush_bin())
        .args(args.iter().take(1))
        .arg(dir)
        .args(args.iter().skip(1))
        .args(extra)
        .output()
        .expect("run evenflush")
}

fn ok(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

const FUNCTIONS: &[&str] = &[
    "MPI_Init",
    "MPI_Comm_rank",
    "MPI_Comm_size",
    "MPI_Isend",
    "MPI_Irecv",
    "MPI_Waitall",
    "MPI_Allreduce",
    "MPI_Finalize",
    "MPI_Barrier",
];

/// The Perfetto export of `dir` with `window` flags, decoded; `None` when the decoder's Python
/// package is missing (skipped, or failed under EVENFLUSH_REQUIRE_ALL).
fn perfetto(dir: &Path, work: &Path, name: &str, window: &[&str]) -> Option<(Value, String)> {
    let file = work.join(name);
    let mut args = vec!["--format", "perfetto", "--out", file.to_str().unwrap()];
    args.extend(window);
    let out = ok(
        evenflush(&["export"], dir, &args),
        &format!("export perfetto {window:?}"),
    );
    let line = stderr(&out);
    let py = Command::new("/usr/bin/python3")
        .arg(common::repo_root().join("tests/perfetto_decode.py"))
        .arg(&file)
        .args(FUNCTIONS)
        .output();
    match py {
        Ok(py) if py.status.success() => Some((
            serde_json::from_slice(&py.stdout).expect("decoder JSON"),
            line,
        )),
        Ok(py) if stderr(&py).contains("No module named 'perfetto'") => {
            common::skip_or_fail("perfetto-python", "the perfetto Python package is missing");
            None
        }
        Ok(py) => panic!("decoding {name} failed: {}", stderr(&py)),
        Err(e) => {
            common::skip_or_fail("perfetto-python", &format!("/usr/bin/python3: {e}"));
            None
        }
    }
}

/// Bad window specs: clear errors from every command. Needs no Python, so it runs even where the
/// Perfetto decoder is missing (an allowed `perfetto-python` skip).
fn bad_window_specs(dir: &Path, work: &Path, suspensions: u64) {
    assert!(suspensions >= 2, "the run needs two suspensions");
    // Bad specs: clear errors from every command.
    let last = suspensions - 1;
    let png = work.join("w.png");
    let png = png.to_str().unwrap();
    let out_file = work.join("x.json");
    let out_file = out_file.to_str().unwrap();
    for (cmd, fixed) in [
        (&["report"][..], &[][..]),
        (
            &["export"],
            &["--format", "chrome-json", "--out", out_file][..],
        ),
        (&["timeline"], &["--png", png][..]),
        (&["compare"], &[dir.to_str().unwrap()][..]),
    ] {
        for (flags, says) in [
            (
                &["--from", "suspension:99"][..],
                format!("has {suspensions} suspensions, numbered 0-{last}"),
            ),
            (&["--ranks", "0,7"], "rank 7 is not in this trace".into()),
            (&["--from", "0.02", "--to", "0.01"], "not before".into()),
            (
                &["--from", "suspension:1", "--to", "suspension:0"],
                "empty window".into(),
            ),
            (&["--to", "soon"], "neither seconds".into()),
        ] {
            let mut a = fixed.to_vec();
            a.extend(flags);
            let out = evenflush(cmd, dir, &a);
            assert!(!out.status.success(), "{cmd:?} {a:?} succeeded");
            assert!(
                stderr(&out).contains(&says),
                "{cmd:?} {a:?}: want {says:?}, got {}",
                stderr(&out)
            );
        }
    }
}

/// `window A-B s` of a summary line, in seconds.
fn window_of(line: &str) -> (f64, f64) {
    let rest = line
        .split("window ")
        .nth(1)
        .unwrap_or_else(|| panic!("no window in {line:?}"));
    let range = rest.split(' ').next().unwrap();
    let (a, b) = range.split_once('-').unwrap();
    (a.parse().unwrap(), b.parse().unwrap())
}

/// The messages crossing the window's edge by a summary line: the last number before
/// `crossing`.
fn crossing_of(line: &str) -> u64 {
    assert!(line.contains("crossing"), "no crossing count in {line:?}");
    let before = line.split("crossing").next().unwrap();
    before
        .split(|c: char| !c.is_ascii_digit())
        .rfind(|w| !w.is_empty())
        .unwrap()
        .parse()
        .unwrap()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap()
}

fn windows(mpi: Mpi) {
    let _guard = mpi_lock();
    let dir = scratch(&format!("windows-{}", mpi.name()));
    // A small threshold: several suspensions in a short run.
    run_traced(
        mpi,
        4,
        "halo",
        &["--iterations", "200"],
        &dir,
        &["--threshold", "4KiB"],
    );
    let work = scratch(&format!("windows-{}-out", mpi.name()));
    let suspensions = common::info_json(&dir)["suspension"]["count"]
        .as_u64()
        .expect("info --json: suspension.count");
    bad_window_specs(&dir, &work, suspensions);
    let Some((full, _)) = perfetto(&dir, &work, "full.pftrace", &[]) else {
        return;
    };

    // The run's start and its suspensions, from the whole export.
    let origin = full["instants"]["MPI_Init done"]
        .as_array()
        .unwrap()
        .iter()
        .map(u)
        .min()
        .unwrap();
    let mut sus: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for s in full["suspension_slices"].as_array().unwrap() {
        let (seq, a, b) = (u(&s[0]), u(&s[2]), u(&s[3]));
        let e = sus.entry(seq).or_insert((a, b));
        e.0 = e.0.min(a);
        e.1 = e.1.max(b);
    }
    assert!(sus.len() >= 2, "the run needs two suspensions: {sus:?}");
    assert_eq!(
        sus.len() as u64,
        suspensions,
        "info and the export: {sus:?}"
    );
    // Suspension 0's end on its last rank to suspension 1's start on its first.
    let (from, to) = (sus[&0].1, sus[&1].0);
    let secs = |t: u64| (t as f64 - origin as f64) / 1e9;

    // suspension:N resolves to the suspensions' times.
    let by_sus = ["--from", "suspension:0", "--to", "suspension:1"];
    let rep = ok(
        evenflush(&["report", "--json"], &dir, &by_sus),
        "report suspension:0..1",
    );
    let line = stderr(&rep);
    let (a, b) = window_of(&line);
    assert!(
        (a - secs(from)).abs() < 2e-6 && (b - secs(to)).abs() < 2e-6,
        "window {a}-{b} s, suspensions say {}-{} s: {line}",
        secs(from),
        secs(to)
    );
    assert!(line.contains("suspension:0 to suspension:1"), "{line}");

    // Report: the calls whose start lies in the window, per function.
    let report: Value = serde_json::from_slice(&rep.stdout).unwrap();
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for c in full["call_begins"].as_array().unwrap() {
        let ts = u(&c[1]);
        if (from..=to).contains(&ts) {
            *want.entry(c[2].as_str().unwrap().to_string()).or_default() += 1;
        }
    }
    let got: BTreeMap<String, u64> = report["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["name"].as_str().unwrap().to_string(), u(&f["count"])))
        .collect();
    assert!(!want.is_empty(), "no call between the suspensions");
    assert_eq!(got, want, "windowed report against the whole export");
    for r in report["ranks"].as_array().unwrap() {
        let span = r["span_s"].as_f64().unwrap();
        assert!(
            span <= secs(to) - secs(from) + 1e-6,
            "rank span {span}: {r}"
        );
    }

    // A rank subset: only those ranks, partners only between them.
    let rep = ok(
        evenflush(&["report", "--json", "--ranks", "1,2"], &dir, &[]),
        "report --ranks 1,2",
    );
    let report: Value = serde_json::from_slice(&rep.stdout).unwrap();
    let ranks: Vec<u64> = report["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| u(&r["rank"]))
        .collect();
    assert_eq!(ranks, [1, 2]);
    for p in report["partners"].as_array().unwrap() {
        assert!([1, 2].contains(&u(&p["source"])) && [1, 2].contains(&u(&p["dest"])));
    }
    assert!(
        stderr(&rep).contains("ranks 1-2 (2 of 4)"),
        "{}",
        stderr(&rep)
    );

    // Perfetto, windowed in time and ranks: slices only inside, one edge mark per message that
    // crosses the window's edge, every flow with both ends.
    let kept: BTreeSet<u64> = [0, 1].into();
    let inside = |pid: u64, ts: u64| kept.contains(&(pid - 1)) && (from..=to).contains(&ts);
    let crossing = full["flow_pairs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| inside(u(&f[0]), u(&f[1])) != inside(u(&f[2]), u(&f[3])))
        .count() as u64;
    let both = full["flow_pairs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| inside(u(&f[0]), u(&f[1])) && inside(u(&f[2]), u(&f[3])))
        .count() as u64;
    assert!(crossing > 0, "no message crosses the window's edge");
    let mut flags = by_sus.to_vec();
    flags.extend(["--ranks", "0-1"]);
    let (win, line) = perfetto(&dir, &work, "window.pftrace", &flags).unwrap();
    assert!(
        u(&win["min_ts"]) >= from && u(&win["max_ts"]) <= to,
        "{line}"
    );
    assert_eq!(u(&win["edge_marks"]), crossing, "{line}");
    assert_eq!(crossing_of(&line), crossing, "{line}");
    assert_eq!(u(&win["flows"]), both + crossing, "{line}");
    assert_eq!(u(&win["flows_without_start"]), 0);
    assert_eq!(u(&win["flows_backwards"]), 0);
    // Every arrow between the same slices as in the whole run (the windowed export takes them from
    // the kept match index, not a matching pass): both ends inside, or the inside end of one that
    // crosses the edge (its other end is on the edge marks' track).
    let pairs = |v: &Value| -> Vec<[u64; 4]> {
        v["flow_pairs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| [u(&f[0]), u(&f[1]), u(&f[2]), u(&f[3])])
            .collect()
    };
    let on_kept = |pid: u64| pid >= 1 && kept.contains(&(pid - 1));
    let full_pairs = pairs(&full);
    let win_pairs = pairs(&win);
    let both_full: Vec<_> = full_pairs
        .iter()
        .filter(|f| inside(f[0], f[1]) && inside(f[2], f[3]))
        .collect();
    let both_win: Vec<_> = win_pairs
        .iter()
        .filter(|f| on_kept(f[0]) && on_kept(f[2]))
        .collect();
    assert_eq!(both_win, both_full, "{line}");
    let mut cross_full: Vec<(bool, u64, u64)> = full_pairs
        .iter()
        .filter(|f| inside(f[0], f[1]) != inside(f[2], f[3]))
        .map(|f| match inside(f[0], f[1]) {
            true => (true, f[0], f[1]),
            false => (false, f[2], f[3]),
        })
        .collect();
    let mut cross_win: Vec<(bool, u64, u64)> = win_pairs
        .iter()
        .filter(|f| on_kept(f[0]) != on_kept(f[2]))
        .map(|f| match on_kept(f[0]) {
            true => (true, f[0], f[1]),
            false => (false, f[2], f[3]),
        })
        .collect();
    cross_full.sort();
    cross_win.sort();
    assert_eq!(cross_win, cross_full, "{line}");
    assert_eq!(
        u(&win["processes"]),
        3,
        "two ranks and the edge marks' track"
    );
    for c in win["call_begins"].as_array().unwrap() {
        assert!(kept.contains(&(u(&c[0]) - 1)), "{c}");
    }

    // Report and compare count the same crossing messages.
    let line = stderr(&ok(evenflush(&["report"], &dir, &flags), "report window"));
    assert_eq!(crossing_of(&line), crossing, "{line}");
    let mut args = vec![dir.to_str().unwrap()];
    args.extend(&flags);
    let line = stderr(&ok(evenflush(&["compare"], &dir, &args), "compare window"));
    assert_eq!(crossing_of(&line), crossing, "{line}");

    // Chrome JSON, the same window: the same edge marks, no event outside.
    let json_file = work.join("window.json");
    let mut args = vec![
        "--format",
        "chrome-json",
        "--out",
        json_file.to_str().unwrap(),
    ];
    args.extend(&flags);
    let line = stderr(&ok(evenflush(&["export"], &dir, &args), "chrome-json"));
    assert_eq!(crossing_of(&line), crossing, "{line}");
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&json_file).unwrap()).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    let edge = events.iter().filter(|e| e["cat"] == "window edge").count() as u64;
    assert_eq!(edge, crossing);
    let (lo, hi) = (from as f64 / 1e3 - 1e-3, to as f64 / 1e3 + 1e-3);
    for e in events.iter().filter(|e| e["ph"] == "X") {
        let ts: f64 = e["ts"]
            .as_str()
            .map_or_else(|| e["ts"].as_f64().unwrap(), |s| s.parse().unwrap());
        let dur = e["dur"].as_f64().unwrap_or(0.0);
        assert!(ts >= lo && ts + dur <= hi, "{e} outside {lo}-{hi} µs");
    }

    // Compare: the call pairs whose start lies in the window.
    let mut args = vec![dir.to_str().unwrap(), "--json"];
    args.extend(by_sus);
    let cmp = ok(evenflush(&["compare"], &dir, &args), "compare windowed");
    let c: Value = serde_json::from_slice(&cmp.stdout).unwrap();
    assert_eq!(u(&c["calls"]), want.values().sum::<u64>(), "compare");
    assert!(stderr(&cmp).contains("suspension:0 to suspension:1"));

    // OTF2 of a window and a subset of ranks reads back.
    let archive = work.join("otf2");
    let mut args = vec!["--format", "otf2", "--out", archive.to_str().unwrap()];
    args.extend(&flags);
    let out = evenflush(&["export"], &dir, &args);
    if !out.status.success() && stderr(&out).contains("without OTF2") {
        common::skip_or_fail("otf2", "this evenflush was built without OTF2 support");
    } else {
        let line = stderr(&ok(out, "otf2 export"));
        assert!(line.contains("cut by the window"), "{line}");
        match Command::new("otf2-print")
            .arg("-Werror")
            .arg(archive.join("traces.otf2"))
            .output()
        {
            Ok(p) => assert!(p.status.success(), "otf2-print -Werror: {}", stderr(&p)),
            Err(_) => common::skip_or_fail("otf2", "otf2-print is not installed"),
        }
    }

    // Timeline, the same window.
    let png = work.join("w.png");
    let mut args = vec!["--png", png.to_str().unwrap()];
    args.extend(&flags);
    let line = stderr(&ok(evenflush(&["timeline"], &dir, &args), "timeline"));
    assert_eq!(crossing_of(&line), crossing, "{line}");
}

#[test]
fn windows_openmpi() {
    windows(Mpi::OpenMpi);
}

#[test]
fn windows_mpich() {
    windows(Mpi::Mpich);
}
