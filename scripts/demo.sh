#!/usr/bin/env bash
# The demo: trace the bundled iterative workload (shaped like the paper's program 1: compute, user
# records, barrier) on 4 ranks under Open MPI with the recorder, then show what the trace holds.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo "== building evenflush and the preload libraries (cargo build --release)"
cargo build --release --workspace --quiet
demo=target/demo
rm -rf "$demo"
mkdir -p "$demo"
bash experiments/apps/build.sh openmpi "$demo/apps" >/dev/null

echo "== evenflush run: 4 ranks, 200 iterations, 64 KiB of user records per rank per iteration"
target/release/evenflush run --out "$demo/trace" --mode off -- \
  mpirun --oversubscribe -np 4 "$demo/apps/iterative" --iterations 200 --compute-us 500 --mem 16
echo
echo "== evenflush info $demo/trace"
target/release/evenflush info "$demo/trace"
