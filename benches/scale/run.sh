#!/usr/bin/env bash
# Cost of the recorder and its protocol at many oversubscribed ranks, against the untraced program.
# Runs `iterative` (compute + MPI_Barrier per iteration, no user records) untraced and traced with
# default settings, interleaved (U T U T ...), and prints the medians of the program's own time
# (total_s: MPI_Wtime from after the start barrier to MPI_Finalize, so start-up is excluded), the
# untraced run-to-run spread (the noise floor), and the median of the paired ratios traced/untraced.
#
# Usage: benches/scale/run.sh [openmpi|mpich] [ranks] [reps] [extra evenflush run flags...]
#   (after cargo build --release). Results go to stdout and target/bench-scale/<mpi>-<ranks>.csv.
set -euo pipefail
cd "$(dirname "$0")/../.."
mpi=${1:-openmpi}
ranks=${2:-64}
reps=${3:-7}
shift $(( $# < 3 ? $# : 3 ))
extra=("$@")
iterations=${ITERATIONS:-200}
units=${WORK_UNITS:-200}
ef=target/release/evenflush
work=target/bench-scale
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
case "$mpi" in
openmpi) launch=(mpirun.openmpi --oversubscribe -np "$ranks") ;;
mpich) launch=(mpirun.mpich -np "$ranks") ;;
*) echo "usage: $0 [openmpi|mpich] [ranks] [reps] [flags...]" >&2; exit 2 ;;
esac
mkdir -p "$work"
bash workloads/build.sh "$mpi" "$work/apps-$mpi" >/dev/null
app=("$work/apps-$mpi/iterative" --iterations "$iterations" --work-units "$units" --mem 0 --record-bytes 0)
csv="$work/$mpi-$ranks.csv"
echo "rep,untraced_s,traced_s,flushes" > "$csv"
total() { sed -n 's/^total_s=//p'; }
for rep in $(seq 1 "$reps"); do
  u=$(timeout 600 "${launch[@]}" "${app[@]}" | total)
  rm -rf "$work/trace"
  t=$(timeout 600 "$ef" run --out "$work/trace" "${extra[@]}" -- "${launch[@]}" "${app[@]}" | total)
  f=$("$ef" info --json "$work/trace" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["suspension"]["flushes"])')
  echo "$rep,$u,$t,$f" >> "$csv"
  echo "rep $rep: untraced $u s, traced $t s, flushes $f"
done
/usr/bin/python3 - "$csv" "$mpi" "$ranks" "${extra[*]:-defaults}" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
u = [float(r["untraced_s"]) for r in rows]
t = [float(r["traced_s"]) for r in rows]
ratios = sorted(b / a for a, b in zip(u, t))
mu = statistics.median(u)
spread = statistics.median(abs(b - a) / mu for a, b in zip(u, u[1:])) if len(u) > 1 else float("nan")
print(f"{sys.argv[2]} P={sys.argv[3]} ({sys.argv[4]}), {len(rows)} interleaved pairs:")
print(f"  untraced median {mu:.4f} s (min {min(u):.4f}, max {max(u):.4f}); "
      f"run-to-run spread (median |consecutive diff|) {100*spread:.1f} %")
print(f"  traced   median {statistics.median(t):.4f} s (min {min(t):.4f}, max {max(t):.4f})")
print(f"  traced/untraced: median of paired ratios {statistics.median(ratios):.3f} "
      f"(min {ratios[0]:.3f}, max {ratios[-1]:.3f}); ratio of medians {statistics.median(t)/mu:.3f}")
PY
