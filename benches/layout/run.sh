#!/usr/bin/env bash
# The aggregated layout against a file per rank, at many oversubscribed ranks: the same flushing
# workload (`iterative` with user records, S = 256 KiB, a decision at every barrier) recorded with
# `--layout rank` and with `--layout shared` (or node), interleaved (R A R A ...). Prints, per
# layout, the medians of the program's own time (total_s), of Z (the equalised pause, which holds
# the write) and the number of trace files left in the directory, plus the median paired ratio.
# An untraced run per pair gives the noise floor (its run-to-run spread).
#
# Usage: benches/layout/run.sh [openmpi|mpich] [ranks] [reps] [shared|node]
#   (after cargo build --release). Rows go to target/bench-layout/<mpi>-<ranks>-<layout>.csv.
set -euo pipefail
cd "$(dirname "$0")/../.."
mpi=${1:-openmpi}
ranks=${2:-64}
reps=${3:-5}
layout=${4:-shared}
iterations=${ITERATIONS:-40}
ef=target/release/evenflush
work=target/bench-layout
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
case "$mpi" in
openmpi) launch=(mpirun.openmpi --oversubscribe -np "$ranks") ;;
mpich) launch=(mpirun.mpich -np "$ranks") ;;
*) echo "usage: $0 [openmpi|mpich] [ranks] [reps] [shared|node]" >&2; exit 2 ;;
esac
mkdir -p "$work"
bash workloads/build.sh "$mpi" "$work/apps-$mpi" >/dev/null
app=("$work/apps-$mpi/iterative" --iterations "$iterations" --work-units 100 --mem 0
     --record-bytes 65536 --records 1)
flags=(--threshold 256KiB --decision-interval 0)
csv="$work/$mpi-$ranks-$layout.csv"
echo "rep,untraced_s,rank_s,rank_z_ms,rank_files,agg_s,agg_z_ms,agg_files,rank_flushes,agg_flushes" > "$csv"
total() { sed -n 's/^total_s=//p'; }
# Z p50 in ms and the flush count, from `info --json`.
zinfo() {
  "$ef" info --json "$1" 2>/dev/null | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)["suspension"]
print("%.3f %d" % (s["z_us"]["p50"] / 1000, s["flushes"]))'
}
files() { find "$1" -maxdepth 1 \( -name '*.evf' -o -name '*.reserve' \) | wc -l; }
for rep in $(seq 1 "$reps"); do
  u=$(timeout 900 "${launch[@]}" "${app[@]}" | total)
  rm -rf "$work/t-rank" "$work/t-agg"
  r=$(timeout 900 "$ef" run --out "$work/t-rank" "${flags[@]}" --layout rank -- "${launch[@]}" "${app[@]}" | total)
  read -r rz rf <<<"$(zinfo "$work/t-rank")"
  a=$(timeout 900 "$ef" run --out "$work/t-agg" "${flags[@]}" --layout "$layout" -- "${launch[@]}" "${app[@]}" | total)
  read -r az af <<<"$(zinfo "$work/t-agg")"
  echo "$rep,$u,$r,$rz,$(files "$work/t-rank"),$a,$az,$(files "$work/t-agg"),$rf,$af" >> "$csv"
  echo "rep $rep: untraced $u s; rank $r s (Z p50 $rz ms, $rf flushes); $layout $a s (Z p50 $az ms, $af flushes)"
done
/usr/bin/python3 - "$csv" "$mpi" "$ranks" "$layout" <<'PY'
import csv, statistics as st, sys
rows = list(csv.DictReader(open(sys.argv[1])))
col = lambda k: [float(r[k]) for r in rows]
u, r, a = col("untraced_s"), col("rank_s"), col("agg_s")
spread = st.median(abs(y - x) / st.median(u) for x, y in zip(u, u[1:])) if len(u) > 1 else float("nan")
print(f"{sys.argv[2]} P={sys.argv[3]}, {len(rows)} interleaved triples (untraced, rank, {sys.argv[4]}):")
print(f"  untraced median {st.median(u):.3f} s; run-to-run spread {100*spread:.1f} %")
print(f"  --layout rank:   median {st.median(r):.3f} s, Z p50 median {st.median(col('rank_z_ms')):.1f} ms, "
      f"{rows[-1]['rank_files']} files left (+{sys.argv[3]} reserve files created and removed)")
print(f"  --layout {sys.argv[4]}: median {st.median(a):.3f} s, Z p50 median {st.median(col('agg_z_ms')):.1f} ms, "
      f"{rows[-1]['agg_files']} files")
print(f"  {sys.argv[4]}/rank: median of paired ratios {st.median(sorted(y / x for x, y in zip(r, a))):.3f}")
PY
