#!/usr/bin/env bash
# Measures the offload protocol's targets on this machine, with real MPI jobs:
#   - the resume spread and pause inequality of flushing suspensions at 2 ranks;
#   - flush throughput against what dd achieves on the same disk, in the same run, like for like:
#     as many concurrent streams as ranks, the same bytes, fdatasync after each flush-sized piece.
# Usage: benches/offload/measure.sh [openmpi|mpich] [out-dir]   (after cargo build --release)
set -euo pipefail
cd "$(dirname "$0")/../.."
mpi=${1:-openmpi}
work=${2:-target/offload-measure}
ef=target/release/evenflush
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
case "$mpi" in
openmpi) launch=(mpirun.openmpi --oversubscribe -np 2) ;;
mpich) launch=(mpirun.mpich -np 2) ;;
*) echo "usage: $0 [openmpi|mpich] [out-dir]" >&2; exit 2 ;;
esac
rm -rf "$work"; mkdir -p "$work"
bash workloads/build.sh "$mpi" "$work/apps" >/dev/null

field() { # field JSON-FILE PATH... : prints one number from `evenflush info --json`
  /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
for k in sys.argv[2:]: d=d[k]
print(d)' "$@"
}

# Since the split decision, a collective without a flush does not suspend at all, so there is no
# "pause without a flush" to measure any more: benches/offload/decision_cost.sh measures what a
# collective costs instead.
echo "== flush throughput: 2 ranks, 1 GiB of incompressible records each, flushed at S = 128 MiB"
$ef run --out "$work/flush" --mode dynamic --threshold 128MiB --limit 1GiB --decision-interval 0 -- "${launch[@]}" \
  "$work/apps/iterative" --iterations 256 --work-units 2000 --mem 4 --record-bytes 4194304 --records 4 --random-payload 64 >/dev/null
$ef info "$work/flush" --json > "$work/flush.json"
echo "flushes $(field "$work/flush.json" suspension flushes); resume spread p99 $(field "$work/flush.json" suspension spread_us p99) µs; pause inequality p99 $(field "$work/flush.json" suspension pause_diff_us p99) µs"
echo "flush: $(field "$work/flush.json" suspension flush_raw_mb_per_s) MB/s raw, $(field "$work/flush.json" suspension flush_stored_mb_per_s) MB/s compressed"
echo "== dd on the same disk, like for like: 2 concurrent streams, 8 x 128 MiB each, fdatasync after each"
# What the flush run does per rank: 8 flushes of 128 MiB of incompressible bytes, each made
# durable before the program goes on, two ranks at once. The source is random bytes held in
# memory (/dev/shm), so that dd, like the recorder, writes from RAM.
src=/dev/shm/evenflush-dd-src.bin
head -c $((128 << 20)) /dev/urandom > "$src"
stream() { # stream N: prints its MB/s (1 MB = 10^6 bytes)
  local out="$work/dd-$1.bin" t0 t1
  rm -f "$out"
  t0=$(date +%s.%N)
  for _ in 1 2 3 4 5 6 7 8; do
    dd if="$src" of="$out" bs=4M oflag=append conv=notrunc,fdatasync status=none
  done
  t1=$(date +%s.%N)
  /usr/bin/python3 -c "import sys; print(f'{8 * 128 * 2**20 / (float(sys.argv[2]) - float(sys.argv[1])) / 1e6:.0f}')" "$t0" "$t1"
  rm -f "$out"
}
stream 0 > "$work/dd-0.rate" & stream 1 > "$work/dd-1.rate" & wait
rm -f "$src"
echo "dd per stream: $(cat "$work/dd-0.rate") and $(cat "$work/dd-1.rate") MB/s (compare with the flush's raw MB/s per rank above)"
