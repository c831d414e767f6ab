#!/usr/bin/env bash
# The demo: the whole chain on the bundled iterative workload (shaped like the paper's program 1:
# compute, user records, barrier), 2 ranks under Open MPI.
#   1. a reference run that keeps its trace in memory (--mode off),
#   2. an offload run that flushes in equalised suspensions whenever a rank holds more than 1 MiB,
#   3. reconstruction of the offload run (the suspensions removed),
#   4. the comparison with the reference: the paper's headline numbers.
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
bash experiments/apps/build.sh openmpi "$demo/apps" >/dev/null
# A fixed amount of work per iteration (not a calibrated time) so the two runs do the same work,
# register-only (`--mem 0`, ~4 ms per iteration): memory-bound work varies by ±10 % between runs
# on a shared machine, which would hide what the demo shows.
app=("$demo/apps/iterative" --iterations 300 --work-units 320000 --mem 0 --record-bytes 131072)

echo
echo "== 1. reference run: trace kept in memory until MPI_Finalize"
$ef run --out "$demo/reference" --mode off -- mpirun --oversubscribe -np 2 "${app[@]}"
echo
echo "== 2. offload run: flush whenever a rank holds more than 1 MiB, in equalised suspensions"
$ef run --out "$demo/offload" --mode dynamic --threshold 1MiB -- mpirun --oversubscribe -np 2 "${app[@]}"
echo
$ef info "$demo/offload"
echo
echo "== 3. reconstruct the offload run (remove the suspensions, DP')"
$ef reconstruct "$demo/offload" --out "$demo/offload.reconstructed"
echo
echo "== 4. compare with the reference run"
$ef compare "$demo/reference" "$demo/offload.reconstructed"
echo
echo "== 5. like for like: the recorder's own cost (DP) removed from both runs"
# The in-memory reference spends more on recording than the offload run (its buffer grows for the
# whole run, the offload run reuses its blocks); removing DP from both compares the program alone.
$ef reconstruct "$demo/offload" --out "$demo/offload.g" --remove both >/dev/null
$ef reconstruct "$demo/reference" --out "$demo/reference.g" --remove dp >/dev/null
$ef compare "$demo/reference.g" "$demo/offload.g" | sed -n 4p
