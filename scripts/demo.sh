#!/usr/bin/env bash
# The demo: the whole chain on the bundled iterative workload (shaped like the paper's program 1:
# compute, user records, barrier), 2 ranks under Open MPI.
#   1. two reference runs that keep their trace in memory (--mode off): two, so that compare can
#      show how far two runs of the same program differ with nothing changed (the noise floor),
#   2. an offload run that flushes in equalised suspensions whenever a rank holds more than 1 MiB,
#   3. reconstruction of the offload run (the suspensions removed),
#   4. the comparison with the references: total time, signed bias, calls within tolerance, per
#      rank, beside the noise floor,
#   5. the same with the recorder's own cost removed from both sides,
#   6. validate: untraced against traced runs, the reconstructed time's error against the untraced
#      time with its 95 % interval and the untraced noise floor, and a PNG of every run. Only 3
#      pairs (--reps 3) to keep the demo to a few minutes on 2 cores: the interval is wide; use
#      --reps 7 or more for a figure to quote.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo "== building evenflush and the preload libraries (cargo build --release)"
cargo build --release --workspace --quiet
ef=target/release/evenflush
demo=target/demo
rm -rf "$demo"
mkdir -p "$demo"
bash workloads/build.sh openmpi "$demo/apps" >/dev/null
# A fixed amount of work per iteration (not a calibrated time) so that all runs do the same work,
# register-only (`--mem 0`, ~4 ms per iteration): memory-bound work varies by ±10 % between runs
# on a shared machine, which would hide what the demo shows.
app=("$demo/apps/iterative" --iterations 300 --work-units 320000 --mem 0 --record-bytes 131072)

echo
echo "== 1. two reference runs: trace kept in memory until MPI_Finalize"
for ref in reference reference2; do
  $ef run --out "$demo/$ref" --mode off -- mpirun --oversubscribe -np 2 "${app[@]}"
done
echo
echo "== 2. offload run: flush whenever a rank holds more than 1 MiB, in equalised suspensions"
$ef run --out "$demo/offload" --mode dynamic --threshold 1MiB -- mpirun --oversubscribe -np 2 "${app[@]}"
echo
$ef info "$demo/offload"
echo
echo "== 3. reconstruct the offload run (remove the suspensions, DP')"
$ef reconstruct "$demo/offload" --out "$demo/offload.reconstructed"
echo
echo "== 4. compare with the references (the second gives the noise floor)"
$ef compare "$demo/reference" "$demo/reference2" "$demo/offload.reconstructed"
echo
echo "== 5. like for like: the recorder's own cost (DP) removed from both runs"
# The in-memory reference spends more on recording than the offload run (its buffer grows for the
# whole run, the offload run reuses its blocks); removing DP from both compares the program alone.
$ef reconstruct "$demo/offload" --out "$demo/offload.g" --remove both >/dev/null
$ef reconstruct "$demo/reference" --out "$demo/reference.g" --remove dp >/dev/null
# The total time only (line 4): DP is spent after each call's end, so durations do not change.
$ef compare "$demo/reference.g" "$demo/offload.g" | sed -n 4p
echo
echo "== 6. validate: 3 untraced and 3 traced runs, interleaved (few reps: a wide interval)"
$ef validate --reps 3 --work "$demo/validate" --png "$demo/validate.png" --threshold 1MiB \
  -- mpirun --oversubscribe -np 2 "${app[@]}"
echo "(every run drawn in $demo/validate.png)"
