#!/usr/bin/env python3
"""How much of a real MPI test suite's traffic the matcher pairs: issue #15's target of at most
0.1 % unmatched sends and receives. Runs every program of tests/mpich-testsuite/list (MPICH's own
test suite, the subset tests/mpich_testsuite.rs runs) traced, reconstructs each trace, and sums
what the matcher reports (`reconstruct --json`: hb.before).

    benches/reconstruct/testsuite_matching.py [openmpi|mpich]

Needs scripts/setup.sh (which fetches the suite) and `cargo build --release --workspace`. Prints
one line per program with anything unmatched or any violation as recorded, then the totals."""
import json, os, subprocess, sys, tempfile

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
mpi = sys.argv[1] if len(sys.argv) > 1 else "openmpi"
ef = os.path.join(root, "target", "release", "evenflush")
script = os.path.join(root, "scripts", "mpich-testsuite.sh")
subprocess.run(["bash", script, "build", mpi], check=True, stdout=subprocess.DEVNULL)
listing = subprocess.run(["bash", script, "list", mpi], check=True, capture_output=True,
                         text=True).stdout.splitlines()
launch = {"openmpi": ["mpirun.openmpi", "--oversubscribe"], "mpich": ["mpirun.mpich"]}[mpi]
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
keys = ["messages", "rma_epochs", "collective_exits", "unmatched_sends", "unmatched_receives",
        "recorded_message_violations", "recorded_collective_violations",
        "recorded_epoch_violations", "waits_on_absent_ranks"]
total = dict.fromkeys(keys, 0)
failed = []
with tempfile.TemporaryDirectory(prefix="evenflush-testsuite-") as scratch:
    for line in listing:
        name, ranks, *args = line.split()
        binary = os.path.join(root, "target", "mpich-testsuite", mpi, name)
        trace = os.path.join(scratch, name.replace("/", "_"))
        run = subprocess.run([ef, "run", "--out", trace, "--"] + launch +
                             ["-np", ranks, binary] + args, env=env, capture_output=True,
                             text=True, timeout=120, cwd=os.path.dirname(binary))
        if run.returncode != 0:
            failed.append(f"{name}: traced run exited {run.returncode}")
            continue
        rec = subprocess.run([ef, "reconstruct", trace, "--out", trace + ".r", "--json",
                              "--threads", "1"], capture_output=True, text=True, timeout=120)
        if rec.returncode != 0:
            failed.append(f"{name}: reconstruct: {rec.stderr.strip()[:200]}")
            continue
        hb = json.loads(rec.stdout)["hb"]["before"]
        for k in keys:
            total[k] += hb.get(k, 0)
        odd = {k: hb[k] for k in keys[3:] if hb.get(k, 0)}
        if odd:
            print(f"{name} ({ranks} ranks): {hb['messages']} messages, " +
                  ", ".join(f"{k} {v}" for k, v in odd.items()), flush=True)
print(f"\n{mpi}: {len(listing)} programs, {len(failed)} not measured")
for f in failed:
    print("  " + f)
unmatched = total["unmatched_sends"] + total["unmatched_receives"]
share = 100.0 * unmatched / max(1, 2 * total["messages"] + unmatched)
print(f"messages matched {total['messages']}, PSCW epochs {total['rma_epochs']}, collective exits "
      f"{total['collective_exits']}")
print(f"unmatched sends {total['unmatched_sends']}, unmatched receives "
      f"{total['unmatched_receives']}: {share:.3f} % of message ends (target <= 0.1 %)")
print(f"violations as recorded: messages {total['recorded_message_violations']}, collectives "
      f"{total['recorded_collective_violations']}, epochs {total['recorded_epoch_violations']}; "
      f"waits on absent ranks {total['waits_on_absent_ranks']}")
