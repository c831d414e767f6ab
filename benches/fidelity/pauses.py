#!/usr/bin/env python3
"""Equal pauses without a tracer (benches/fidelity/pause_probe.c): runs the untraced iterative
program K times plain and K times with 4 equal pauses, interleaved (plain, paused, plain, ...),
and compares the plain span with the paused span minus its pauses, as reconstruction removes them.

    benches/fidelity/pauses.py [openmpi|mpich] [K] [pause ms]

A negative difference means the pauses themselves made the program faster: work that would have
interrupted the ranks (the kernel's, other processes') ran while they slept, and reconstruction
then removes that time with the pause. Prints medians, the plain runs' noise floor (median
relative difference of consecutive plain runs) and a 95 % bootstrap interval of the difference."""
import os, random, statistics, subprocess, sys

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
mpi = sys.argv[1] if len(sys.argv) > 1 else "openmpi"
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 11
pause_ms = sys.argv[3] if len(sys.argv) > 3 else "16"
out = os.path.join(root, "target", "fidelity")
apps = os.path.join(out, f"apps-{mpi}")
probe = os.path.join(out, f"pause_probe-{mpi}.so")
cc = {"openmpi": "mpicc.openmpi", "mpich": "mpicc.mpich"}[mpi]
os.makedirs(out, exist_ok=True)
subprocess.run(["bash", os.path.join(root, "workloads/build.sh"), mpi, apps], check=True,
               stdout=subprocess.DEVNULL)
subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", probe,
                os.path.join(root, "benches/fidelity/pause_probe.c")], check=True)
launch = {"openmpi": ["mpirun.openmpi", "--oversubscribe", "-np", "2", "-x", "LD_PRELOAD",
                      "-x", "PAUSE_AT", "-x", "PAUSE_MS"],
          "mpich": ["mpirun.mpich", "-np", "2"]}[mpi]
program = [os.path.join(apps, "iterative"), "--iterations", "1200", "--work-units", "80000",
           "--mem", "0", "--record-bytes", "65536"]


def run(paused):
    env = dict(os.environ, LD_PRELOAD=probe, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", PAUSE_MS=pause_ms)
    # The recorder's 4 flushes at S = 8 MiB came about every fifth of the run.
    env["PAUSE_AT"] = "240,480,720,960" if paused else ""
    p = subprocess.run(launch + program, env=env, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"run failed:\n{p.stdout}\n{p.stderr}")
    ranks = [line.split() for line in p.stderr.splitlines() if line.startswith("PAUSE rank")]
    if len(ranks) != 2:
        sys.exit(f"expected 2 PAUSE lines:\n{p.stderr}")
    # Longest over ranks, as validate quotes it; the pauses are taken out rank by rank.
    return max(float(r[4]) - float(r[6]) for r in ranks), max(float(r[6]) for r in ranks)


plain, paused, pause_total = [], [], []
for i in range(reps):
    plain.append(run(False)[0])
    span, p = run(True)
    paused.append(span)
    pause_total.append(p)
    print(f"pair {i + 1}: plain {plain[-1]:.4f} s, paused minus pauses {span:.4f} s "
          f"({(span / plain[-1] - 1) * 100:+.2f} %), pauses {p * 1e3:.1f} ms", flush=True)
mp, mq = statistics.median(plain), statistics.median(paused)
noise = statistics.median(abs(b / a - 1) for a, b in zip(plain, plain[1:])) * 100
rng = random.Random(1)
boot = sorted(statistics.median(rng.choices(paused, k=reps)) / statistics.median(
    rng.choices(plain, k=reps)) - 1 for _ in range(2000))
print(f"{mpi}: {reps} pairs, plain median {mp:.4f} s, noise floor {noise:.2f} %, "
      f"paused minus pauses {mq:.4f} s: {(mq / mp - 1) * 100:+.2f} % "
      f"[{boot[50] * 100:+.2f}, {boot[1949] * 100:+.2f}], pauses {statistics.median(pause_total) * 1e3:.1f} ms")
