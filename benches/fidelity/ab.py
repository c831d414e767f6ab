#!/usr/bin/env python3
"""Two builds' reconstructions of the same kept traces, against the same untraced runs.

A change to the reconstruction model is judged here without run-to-run noise: both builds read
the very traces that `KEEP=1 benches/fidelity/run.sh` kept, so any difference between their T(G)
is the model's alone. The untraced median comes from that run's validate JSON.

    ab.py OLD_EVENFLUSH NEW_EVENFLUSH [--fidelity target/fidelity] MPI-WORKLOAD ...

e.g. `ab.py /tmp/old/evenflush target/release/evenflush openmpi-hpcc mpich-halo`. Prints a
Markdown table (T(G) of each model and build, as an error against the untraced median) and, per
workload, every run's paired difference new − old.
"""

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

MODELS = ("subtract", "replay")


def reconstructed_s(binary: str, trace: Path, model: str, scratch: Path) -> float:
    out = scratch / f"{trace.name}-{model}"
    shutil.rmtree(out, ignore_errors=True)
    run = subprocess.run(
        [binary, "reconstruct", str(trace), "--out", str(out), "--model", model,
         "--remove", "both", "--json"],
        capture_output=True, text=True)
    shutil.rmtree(out, ignore_errors=True)
    if run.returncode != 0:
        sys.exit(f"{binary} reconstruct {trace} --model {model} failed:\n{run.stderr}")
    return json.loads(run.stdout)["reconstructed_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("workloads", nargs="+", help="<mpi>-<workload>, as run.sh names them")
    ap.add_argument("--fidelity", default="target/fidelity", type=Path)
    args = ap.parse_args()
    print("| workload | pairs | untraced median | noise floor | subtract old | subtract new "
          "| replay old | replay new |")
    print("|---|---|---|---|---|---|---|---|")
    notes = []
    with tempfile.TemporaryDirectory(prefix="evenflush-ab-") as tmp:
        scratch = Path(tmp)
        for name in args.workloads:
            summary = json.loads((args.fidelity / f"{name}.json").read_text())
            untraced = summary["untraced_median_s"]
            kept = args.fidelity / f"validate-{name}"
            traces = sorted((t for t in kept.glob("traced-*")
                             if t.is_dir() and t.name.removeprefix("traced-").isdigit()),
                            key=lambda t: int(t.name.removeprefix("traced-")))
            if not traces:
                sys.exit(f"{kept}: no kept traces (run run.sh with KEEP=1)")
            got = {(build, model): [reconstructed_s(binary, t, model, scratch) for t in traces]
                   for build, binary in (("old", args.old), ("new", args.new))
                   for model in MODELS}

            def error(values: list) -> str:
                return f"{100 * (statistics.median(values) / untraced - 1):+.2f} %"

            cells = [error(got[(b, m)]) for m in MODELS for b in ("old", "new")]
            print(f"| {name} | {len(traces)} | {untraced:.3f} s "
                  f"| {100 * summary['untraced_spread']:.2f} % | " + " | ".join(cells) + " |")
            for model in MODELS:
                diffs = [100 * (n - o) / untraced
                         for n, o in zip(got[("new", model)], got[("old", model)])]
                notes.append(f"{name} {model}: new − old per run, % of untraced: "
                             + ", ".join(f"{d:+.2f}" for d in diffs))
    print()
    for line in notes:
        print(line)


if __name__ == "__main__":
    main()
