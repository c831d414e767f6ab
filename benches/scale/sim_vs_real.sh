#!/usr/bin/env bash
# Validates `evenflush simulate` on real runs it was not fitted to: the same offload workload at
# P = 2 … 32 real ranks on this machine, then the simulator with what was measured independently.
#
# Real: `iterative` (compute + MPI_Barrier per iteration, with user records of incompressible bytes:
# M per rank in total), untraced and traced with --threshold S, interleaved (U T U T ...). Work per
# rank shrinks as 2/P, so that the untraced run stays near the same length when P ranks share the
# 2 cores (oversubscribed above P = 2).
# Inputs given to the simulator, none of them taken from the traced run it is compared with at that P:
#   - the untraced time at that P (the application, which the simulator does not model);
#   - one-way message time m and recording speed (M / DP), both from the P = 2 traced runs only;
#   - the disk: aggregate MB/s of 2 concurrent dd streams with fdatasync, measured before the runs;
#   - the recorder's settings (split decision every 100 ms, tree clock scheme, 3 tries).
# Compared per P: traced/untraced, flushes, Z p50, and the share of the traced run spent paused.
#
# Usage: benches/scale/sim_vs_real.sh [openmpi|mpich] [reps] [P ...]   (after cargo build --release)
#   defaults: openmpi 3 2 4 8 16 32. Raw results: target/sim-vs-real/<mpi>.csv
set -euo pipefail
cd "$(dirname "$0")/../.."
mpi=${1:-openmpi}
reps=${2:-3}
shift $(( $# < 2 ? $# : 2 ))
ranks_list=("$@")
[ ${#ranks_list[@]} -gt 0 ] || ranks_list=(2 4 8 16 32)
[ "${ranks_list[0]}" = 2 ] || { echo "the first P must be 2: the simulator's inputs come from it" >&2; exit 2; }
iterations=${ITERATIONS:-200}
units2=${WORK_UNITS:-700000}
trace_mib=${TRACE_MIB:-32}
threshold=${THRESHOLD:-8MiB}
ef=target/release/evenflush
work=target/sim-vs-real
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$work"
bash workloads/build.sh "$mpi" "$work/apps-$mpi" >/dev/null
py=/usr/bin/python3

launcher() { # launcher P: the mpirun command line
  case "$mpi" in
  openmpi) echo "mpirun.openmpi --oversubscribe -np $1" ;;
  mpich) echo "mpirun.mpich -np $1" ;;
  *) echo "usage: $0 [openmpi|mpich] [reps] [P ...]" >&2; exit 2 ;;
  esac
}

echo "== disk: 2 concurrent dd streams of 4 x 64 MiB, fdatasync after each piece"
src=/dev/shm/evenflush-sim-vs-real.bin
head -c $((64 << 20)) /dev/urandom > "$src"
t0=$(date +%s.%N)
for s in 0 1; do
  ( for _ in 1 2 3 4; do dd if="$src" of="$work/dd-$s.bin" bs=4M oflag=append conv=notrunc,fdatasync status=none; done ) &
done
wait
t1=$(date +%s.%N)
rm -f "$src" "$work"/dd-*.bin
disk_mibps=$($py -c "import sys; print(f'{2 * 4 * 64 / (float(sys.argv[2]) - float(sys.argv[1])):.0f}')" "$t0" "$t1")
echo "aggregate $disk_mibps MiB/s"

csv="$work/$mpi.csv"
echo "ranks,rep,untraced_s,traced_s,flushes,z_p50_ms,z_total_s,dp_s,m_ns" > "$csv"
for ranks in "${ranks_list[@]}"; do
  units=$(( units2 * 2 / ranks ))
  bytes=$(( trace_mib * 1048576 / iterations ))
  app=("$work/apps-$mpi/iterative" --iterations "$iterations" --work-units "$units" --mem 0
    --record-bytes "$bytes" --records 4 --random-payload 8)
  read -r -a launch <<< "$(launcher "$ranks")"
  for rep in $(seq 1 "$reps"); do
    u=$(timeout 600 "${launch[@]}" "${app[@]}" | sed -n 's/^total_s=//p')
    rm -rf "$work/trace" "$work/trace.reconstructed"
    t=$(timeout 600 "$ef" run --out "$work/trace" --threshold "$threshold" -- "${launch[@]}" "${app[@]}" | sed -n 's/^total_s=//p')
    "$ef" info --json "$work/trace" > "$work/info.json"
    "$ef" reconstruct --remove both --json "$work/trace" > "$work/rec.json" 2>/dev/null
    m=$("$ef" dump --rank 0 "$work/trace" | sed -n 's/.*Suspension(.* m_ns: \([0-9.]*\),.*/\1/p' | sort -g | awk '{v[NR]=$1} END {print NR ? v[int((NR+1)/2)] : ""}')
    $py - "$work/info.json" "$work/rec.json" "$ranks" "$rep" "$u" "$t" "${m:-nan}" >> "$csv" <<'PY'
import json, sys
info, rec = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
s = info["suspension"]
print(",".join([sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6], str(s["flushes"]),
                f'{s["z_us"]["p50"] / 1e3:.3f}', f'{rec["suspensions"]["z_total_s"]:.4f}',
                f'{rec["dp_s"]:.4f}', sys.argv[7]]))
PY
    tail -1 "$csv"
  done
done

$py - "$csv" "$ef" "$iterations" "$trace_mib" "$threshold" "$disk_mibps" "$mpi" <<'PY'
import csv, json, statistics as st, subprocess, sys
path, ef, iterations, trace_mib, threshold, disk, mpi = sys.argv[1:]
rows = list(csv.DictReader(open(path)))
by = {}
for r in rows:
    by.setdefault(int(r["ranks"]), []).append(r)
med = lambda rs, k: st.median(float(r[k]) for r in rs)
two = by[2]
m_us = med([r for r in two if r["m_ns"] != "nan"], "m_ns") / 1e3
append = st.median(int(trace_mib) / float(r["dp_s"]) for r in two if float(r["dp_s"]) > 0)
print(f"\n{mpi}: inputs from P = 2 only: m = {m_us:.2f} µs, recording {append:.0f} MiB/s; disk {disk} MiB/s aggregate")
print(f"{'P':>4} {'untraced s':>10} | {'traced/untraced':>15} {'sim':>6} | {'flushes':>7} {'sim':>4} | "
      f"{'Z p50 ms':>8} {'sim':>6} | {'paused %':>8} {'sim':>6}")
for ranks in sorted(by):
    rs = by[ranks]
    u = med(rs, "untraced_s")
    ratio = st.median(float(r["traced_s"]) / float(r["untraced_s"]) for r in rs)
    paused = st.median(float(r["z_total_s"]) / float(r["traced_s"]) for r in rs)
    cmd = [ef, "simulate", "--ranks", str(ranks), "--iterations", iterations,
           "--trace-bytes", f"{trace_mib}MiB", "--threshold", threshold, "--mode", "untraced,dynamic",
           "--decision", "split", "--decision-interval", "100ms", "--clock-scheme", "tree",
           "--clock-tries", "3", "--remedy", "both", "--latency-us", f"{m_us}",
           "--jitter-us", f"{m_us / 4}", "--drift-ppm", "0", "--read-jitter-us", "0.02",
           "--untraced-s", f"{u}", "--imbalance", "0", "--no-swap", "--post-write-ms", "0",
           "--disk-mbps", "100000", "--disk-efficiency", "1", "--fs-mbps", disk,
           "--append-mbps", f"{append}", "--json"]
    sim = {d["mode"]: d for d in json.loads(subprocess.check_output(cmd))}
    d = sim["dynamic"]
    print(f"{ranks:>4} {u:>10.3f} | {ratio:>15.3f} {d['total_s'] / d['untraced_s']:>6.3f} | "
          f"{med(rs, 'flushes'):>7.0f} {d['flushes']:>4} | {med(rs, 'z_p50_ms'):>8.1f} "
          f"{d['z_us']['p50'] / 1e3:>6.1f} | {100 * paused:>8.1f} {100 * d['z_sum_s'] / d['total_s']:>6.1f}")
PY
