#!/usr/bin/env bash
# Measures the offload protocol's targets on this machine, with real MPI jobs:
#   - suspension cost without a flush at 2 ranks (pause p50/p99), and the resume spread;
#   - flush throughput against what dd achieves on the same disk, in the same run.
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
bash experiments/apps/build.sh "$mpi" "$work/apps" >/dev/null

field() { # field JSON-FILE PATH... : prints one number from `evenflush info --json`
  /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
for k in sys.argv[2:]: d=d[k]
print(d)' "$@"
}

echo "== suspension cost without a flush: 2000 barriers, nothing to write (S = 1 GiB)"
$ef run --out "$work/noflush" --mode dynamic --threshold 1GiB --limit 2GiB -- "${launch[@]}" \
  "$work/apps/iterative" --iterations 2000 --work-units 2000 --mem 4 --record-bytes 0 >/dev/null
$ef info "$work/noflush" --json > "$work/noflush.json"
echo "pause without a flush (µs): p50 $(field "$work/noflush.json" suspension noflush_pause_us p50)  p99 $(field "$work/noflush.json" suspension noflush_pause_us p99)"
echo "resume spread (µs):         p50 $(field "$work/noflush.json" suspension spread_us p50)  p99 $(field "$work/noflush.json" suspension spread_us p99)"
echo "pause inequality (µs):      p50 $(field "$work/noflush.json" suspension pause_diff_us p50)  p99 $(field "$work/noflush.json" suspension pause_diff_us p99)"

echo "== flush throughput: 2 ranks, 1 GiB of incompressible records each, flushed at S = 128 MiB"
$ef run --out "$work/flush" --mode dynamic --threshold 128MiB --limit 1GiB -- "${launch[@]}" \
  "$work/apps/iterative" --iterations 256 --work-units 2000 --mem 4 --record-bytes 4194304 --records 4 --random-payload 64 >/dev/null
$ef info "$work/flush" --json > "$work/flush.json"
echo "flushes $(field "$work/flush.json" suspension flushes); resume spread p99 $(field "$work/flush.json" suspension spread_us p99) µs; pause inequality p99 $(field "$work/flush.json" suspension pause_diff_us p99) µs"
echo "flush: $(field "$work/flush.json" suspension flush_raw_mb_per_s) MB/s raw, $(field "$work/flush.json" suspension flush_stored_mb_per_s) MB/s compressed"
echo "== dd on the same disk (1 GiB, fdatasync)"
dd if=/dev/zero of="$work/dd.bin" bs=4M count=256 conv=fdatasync 2>&1 | tail -n 1
rm -f "$work/dd.bin"
