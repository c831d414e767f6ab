#!/usr/bin/env bash
# What the protocol adds at a collective that does not flush, 2 ranks, shared memory: a loop of
# MPI_Barrier with no work and nothing to write, traced with the protocol (--mode dynamic, S far
# above what is recorded) and without it (--mode off: the same recorder, no protocol), interleaved.
# The difference of the program's own time (total_s) per barrier is the protocol's cost per
# collective: the counter at most collectives, and at decision points (every ~100 ms) one MPI_Wait
# and one MPI_Iallreduce. Run with `blocking` as the third argument for the paper's decision.
#
# Usage: benches/offload/decision_cost.sh [openmpi|mpich] [pairs] [split|blocking]
set -euo pipefail
cd "$(dirname "$0")/../.."
mpi=${1:-openmpi}
pairs=${2:-7}
decision=${3:-split}
iterations=${ITERATIONS:-200000}
ef=target/release/evenflush
work=target/bench-decision
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
case "$mpi" in
openmpi) launch=(mpirun.openmpi --oversubscribe -np 2) ;;
mpich) launch=(mpirun.mpich -np 2) ;;
*) echo "usage: $0 [openmpi|mpich] [pairs] [split|blocking]" >&2; exit 2 ;;
esac
mkdir -p "$work"
bash workloads/build.sh "$mpi" "$work/apps-$mpi" >/dev/null
app=("$work/apps-$mpi/iterative" --iterations "$iterations" --work-units 0 --mem 0 --record-bytes 0)
total() { sed -n 's/^total_s=//p'; }
run() { rm -rf "$work/trace"; "$ef" run --out "$work/trace" "$@" -- "${launch[@]}" "${app[@]}" | total; }
offs=(); dyns=()
for p in $(seq 1 "$pairs"); do
  off=$(run --mode off)
  dyn=$(run --mode dynamic --threshold 1GiB --limit 2GiB --decision "$decision")
  offs+=("$off"); dyns+=("$dyn")
  echo "pair $p: off $off s, dynamic ($decision) $dyn s"
done
/usr/bin/python3 - "$iterations" "$mpi" "$decision" "${offs[*]}" "${dyns[*]}" <<'PY'
import statistics, sys
n = int(sys.argv[1]); off = [float(x) for x in sys.argv[4].split()]; dyn = [float(x) for x in sys.argv[5].split()]
per = lambda t: t / (n + 2) * 1e9
deltas = sorted(per(b) - per(a) for a, b in zip(off, dyn))
noise = statistics.median(abs(per(b) - per(a)) for a, b in zip(off, off[1:])) if len(off) > 1 else float("nan")
print(f"{sys.argv[2]}, {sys.argv[3]} decision, {len(off)} pairs of {n} barriers:")
print(f"  per barrier: off median {statistics.median(map(per, off)):.1f} ns, dynamic median {statistics.median(map(per, dyn)):.1f} ns")
print(f"  protocol cost per collective without a flush (paired difference): median {statistics.median(deltas):.1f} ns "
      f"(min {deltas[0]:.1f}, max {deltas[-1]:.1f}); off run-to-run noise {noise:.1f} ns per barrier")
PY
