//! `evenflush report`, `export` (Perfetto, OTF2) and `timeline` on real `mpirun` jobs under Open MPI
//! and MPICH, checked against the trace itself and against `evenflush info`.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use common::{Mpi, info_json, mpi_lock, read_trace, run_traced, scratch};
use format::Event;

fn evenflush(args: &[&str], dir: &Path, extra: &[&Path]) -> std::process::Output {
    let out = Command::new(common::evenflush_bin())
        .args(args.iter().take(1))
        .arg(dir)
        .args(args.iter().skip(1))
        .args(extra)
        .output()
        .expect("run evenflush");
    assert!(
        out.status.success(),
        "evenflush {args:?} {} failed:\n{}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Point-to-point messages the trace says were sent (a send call with a real peer).
fn sends_in_trace(dir: &Path) -> u64 {
    let mut n = 0;
    for r in read_trace(dir) {
        for e in r.all() {
            if let Event::Call(c) = e
                && c.peer >= 0
                && matches!(
                    r.name(c.func),
                    "MPI_Send"
                        | "MPI_Ssend"
                        | "MPI_Bsend"
                        | "MPI_Rsend"
                        | "MPI_Isend"
                        | "MPI_Issend"
                        | "MPI_Sendrecv"
                )
            {
                n += 1;
            }
        }
    }
    n
}

fn check_report(dir: &Path) {
    let out = evenflush(&["report", "--json"], dir, &[]);
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("report --json is JSON");
    let info = info_json(dir);
    let counts: HashMap<String, u64> = report["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap().to_string(),
                f["count"].as_u64().unwrap(),
            )
        })
        .collect();
    let want: HashMap<String, u64> = info["functions"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
        .collect();
    assert_eq!(
        counts,
        want,
        "{}: report and info disagree on call counts",
        dir.display()
    );
    for f in report["functions"].as_array().unwrap() {
        assert_eq!(f["histogram"].as_array().unwrap().len(), 24);
        assert!(
            f["min_s"].as_f64() <= f["mean_s"].as_f64()
                && f["mean_s"].as_f64() <= f["max_s"].as_f64()
        );
    }
    let world = info["ranks"].as_u64().unwrap() as usize;
    assert_eq!(report["ranks"].as_array().unwrap().len(), world);
    let sent: u64 = report["partners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|pair| pair["messages"].as_u64().unwrap())
        .sum();
    assert_eq!(sent, sends_in_trace(dir), "partner pairs total");
}

fn check_chrome_json(dir: &Path, scratch_dir: &Path) {
    let file = scratch_dir.join("trace.json");
    evenflush(
        &["export", "--format", "chrome-json", "--out"],
        dir,
        &[&file],
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    let mut by_ph: HashMap<&str, u64> = HashMap::new();
    let mut outs = std::collections::HashSet::new();
    let mut ins = std::collections::HashSet::new();
    for e in events {
        let ph = e["ph"].as_str().unwrap();
        *by_ph.entry(ph).or_default() += 1;
        assert!(
            ph != "s" && ph != "f",
            "flows are bound to slices, not separate events"
        );
        if let Some(id) = e["bind_id"].as_u64() {
            assert_eq!(ph, "X", "{e}");
            if e["flow_out"] == true {
                assert!(outs.insert(id), "flow out {id} twice");
            } else {
                assert_eq!(e["flow_in"], true, "{e}");
                assert!(ins.insert(id), "flow in {id} twice");
            }
        }
    }
    let sends = sends_in_trace(dir);
    assert_eq!(ins.len() as u64, sends, "one flow per message sent");
    assert!(ins.is_subset(&outs), "every flow in has its flow out");
    let calls: u64 = info_json(dir)["mpi_calls_total"].as_u64().unwrap();
    let call_slices = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] != "evenflush" && e["cat"] != "message")
        .count() as u64;
    assert_eq!(call_slices, calls);
    assert!(
        by_ph.get("C").copied().unwrap_or(0) > 0,
        "buffer fill counter"
    );
}

/// The native Perfetto export, decoded by Perfetto's own Python classes
/// (tests/perfetto_decode.py): tracks, slices per rank, flows and counters against the trace.
fn check_perfetto(dir: &Path, scratch_dir: &Path) {
    let file = scratch_dir.join("trace.pftrace");
    let out = evenflush(&["export", "--format", "perfetto", "--out"], dir, &[&file]);
    eprintln!("{}", String::from_utf8_lossy(&out.stderr).trim());
    let info = info_json(dir);
    let functions: Vec<String> = info["functions"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let script = common::repo_root().join("tests/perfetto_decode.py");
    let decoded = match Command::new("/usr/bin/python3")
        .arg(&script)
        .arg(&file)
        .args(&functions)
        .output()
    {
        Ok(py) if py.status.success() => py,
        Ok(py) if String::from_utf8_lossy(&py.stderr).contains("No module named 'perfetto'") => {
            common::skip_or_fail(
                "perfetto-python",
                "the perfetto Python package is not installed (scripts/setup.sh installs it)",
            );
            return;
        }
        Ok(py) => panic!(
            "decoding the Perfetto export failed: {}",
            String::from_utf8_lossy(&py.stderr)
        ),
        Err(e) => {
            common::skip_or_fail("perfetto-python", &format!("/usr/bin/python3: {e}"));
            return;
        }
    };
    let got: serde_json::Value =
        serde_json::from_slice(&decoded.stdout).expect("the decoder prints JSON");
    let per_rank = info["per_rank"].as_array().unwrap();
    let ranks = per_rank.len() as u64;
    let threads: u64 = per_rank
        .iter()
        .map(|r| r["threads"].as_u64().unwrap())
        .sum();
    assert_eq!(got["processes"], ranks, "{got}");
    assert_eq!(got["threads"], threads, "{got}");
    assert_eq!(got["counter_tracks"], ranks, "{got}");
    // pid = world rank + 1.
    for r in per_rank {
        let pid = (r["rank"].as_u64().unwrap() + 1).to_string();
        assert_eq!(
            got["calls_per_pid"][&pid], r["mpi_calls"],
            "rank {}: call slices: {got}",
            r["rank"]
        );
    }
    assert_eq!(got["calls"], info["mpi_calls_total"], "{got}");
    assert_eq!(
        got["region_names"], info["regions"],
        "region slices by name: {got}"
    );
    assert_eq!(
        got["suspensions"],
        info["suspension"]["count"].as_u64().unwrap() * ranks,
        "{got}"
    );
    assert_eq!(
        got["flows"],
        sends_in_trace(dir),
        "one flow per message sent: {got}"
    );
    assert_eq!(got["flow_ends_repeated"], 0, "{got}");
    assert_eq!(got["flows_without_start"], 0, "{got}");
    assert_eq!(got["flows_backwards"], 0, "{got}");
    assert!(
        got["counters"].as_u64().unwrap() > 0,
        "buffer fill counter: {got}"
    );
}

fn check_otf2(dir: &Path, scratch_dir: &Path) {
    let archive = scratch_dir.join("otf2");
    let probe = Command::new(common::evenflush_bin())
        .args(["export", "--format", "otf2", "--out"])
        .arg(&archive)
        .arg(dir)
        .output()
        .unwrap();
    if !probe.status.success() && String::from_utf8_lossy(&probe.stderr).contains("without OTF2") {
        common::skip_or_fail("otf2", "this evenflush was built without OTF2 support");
        return;
    }
    assert!(
        probe.status.success(),
        "{}",
        String::from_utf8_lossy(&probe.stderr)
    );
    let Ok(printed) = Command::new("otf2-print")
        .arg("-Werror")
        .arg(archive.join("traces.otf2"))
        .output()
    else {
        common::skip_or_fail(
            "otf2",
            "otf2-print is not installed: the archive is not checked",
        );
        return;
    };
    assert!(
        printed.status.success(),
        "otf2-print -Werror: {}",
        String::from_utf8_lossy(&printed.stderr)
    );
    let text = String::from_utf8_lossy(&printed.stdout);
    let count = |kind: &str| {
        text.lines()
            .filter(|l| l.split_whitespace().next() == Some(kind))
            .count() as u64
    };
    let sends = sends_in_trace(dir);
    assert_eq!(
        count("MPI_SEND") + count("MPI_ISEND"),
        sends,
        "one MPI send record per message"
    );
    assert_eq!(
        count("MPI_RECV") + count("MPI_IRECV"),
        sends,
        "one MPI receive record per message"
    );
    assert_eq!(count("ENTER"), count("LEAVE"));
    // One BufferFlush per suspension in which a rank wrote its trace, inside its measurement-off
    // interval.
    let info = info_json(dir);
    let flushed: u64 = info["per_rank"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rank"].as_u64().unwrap())
        .map(|rank| {
            read_trace(dir)
                .iter()
                .filter(|t| u64::from(t.rank) == rank)
                .flat_map(|t| t.all())
                .filter(|e| matches!(e, Event::Suspension(s) if s.flushed && s.write_ns > 0))
                .count() as u64
        })
        .sum();
    assert_eq!(count("BUFFER_FLUSH"), flushed, "BufferFlush records");
    assert_eq!(count("MEASUREMENT_ON_OFF") % 2, 0);
    // The Python reader of the OTF2 project, where installed, must read the same records.
    let script = "import otf2, sys\nn = 0\nwith otf2.reader.open(sys.argv[1]) as t:\n    for _, e in t.events:\n        n += type(e).__name__ in ('MpiSend', 'MpiIsend')\nprint(n)\n";
    match Command::new("/usr/bin/python3")
        .args(["-c", script])
        .arg(archive.join("traces.otf2"))
        .output()
    {
        Ok(py) if py.status.success() => {
            let n: u64 = String::from_utf8_lossy(&py.stdout).trim().parse().unwrap();
            assert_eq!(n, sends, "python otf2 reader");
        }
        // The reader failing on our archive is a failure; only its absence may be skipped.
        Ok(py) if !String::from_utf8_lossy(&py.stderr).contains("No module named 'otf2'") => {
            panic!(
                "the python otf2 reader failed on the archive: {}",
                String::from_utf8_lossy(&py.stderr)
            )
        }
        Ok(py) => common::skip_or_fail(
            "otf2",
            &format!(
                "python otf2 reader unavailable: {}",
                String::from_utf8_lossy(&py.stderr).trim()
            ),
        ),
        Err(e) => common::skip_or_fail("otf2", &format!("/usr/bin/python3: {e}")),
    }
}

fn check_timeline(dir: &Path, scratch_dir: &Path, ranks: u32) {
    let png = scratch_dir.join("timeline.png");
    evenflush(&["timeline", "--png"], dir, &[&png]);
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    assert_eq!(w, 1600);
    assert!(h >= 150 + 20 * ranks && h <= 2000, "height {h}");
}

fn views(mpi: Mpi) {
    let _guard = mpi_lock();
    for (program, ranks, flags) in [
        ("halo", 4, &["--threshold", "8KiB"][..]),
        ("ring", 2, &["--mode", "off"][..]),
        // User regions, nested, around barriers.
        ("user_records", 2, &[][..]),
    ] {
        let out = scratch(&format!("views-{program}-{}", mpi.name()));
        run_traced(mpi, ranks, program, &[], &out, flags);
        let work = scratch(&format!("views-{program}-{}-out", mpi.name()));
        check_report(&out);
        check_chrome_json(&out, &work);
        check_perfetto(&out, &work);
        check_otf2(&out, &work);
        check_timeline(&out, &work, ranks);
    }
}

#[test]
fn views_openmpi() {
    views(Mpi::OpenMpi);
}

#[test]
fn views_mpich() {
    views(Mpi::Mpich);
}
