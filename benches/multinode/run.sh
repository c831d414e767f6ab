#!/usr/bin/env bash
# The 2-node job of tests/multinode.rs (2 emulated nodes x 2 ranks, scripts/emunode), untraced (A)
# and traced (B), interleaved A B A B so slow drifts of a shared machine hit both alike. Prints,
# per MPI, the medians of the program's own total_s, the untraced spread, and traced/untraced; and
# for the traced runs the reconstructed time T(G) (DP' and DP removed; span from the end of MPI_Init
# to MPI_Finalize, against the program's own total_s, which starts after its first barrier: the
# few collectives before it are in T(G) only) and the resume spread of flushing suspensions.
#
#   benches/multinode/run.sh [--reps K] [--mpi openmpi|mpich|both] [--iterations N]
#                            [--threshold SIZE] [--work-units U] [--keep DIR]
#
# Needs root (namespaces), the emulated nodes in /etc/hosts (scripts/setup.sh) and a release build
# (`cargo build --release --workspace`). EVENFLUSH=path overrides the evenflush binary. Traces go
# to a temporary directory removed after each run unless --keep DIR is given.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
reps=5 mpis="openmpi mpich" iterations=30 threshold=256KiB units=200000 keep=""
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift 2 ;;
    --mpi) case "$2" in both) mpis="openmpi mpich" ;; openmpi|mpich) mpis=$2 ;;
             *) echo "--mpi openmpi|mpich|both" >&2; exit 2 ;; esac; shift 2 ;;
    --iterations) iterations=$2; shift 2 ;;
    --threshold) threshold=$2; shift 2 ;;
    --work-units) units=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

evenflush=${EVENFLUSH:-$root/target/release/evenflush}
agent=$root/scripts/emunode/agent.sh
[ -x "$evenflush" ] || { echo "no $evenflush: run cargo build --release --workspace" >&2; exit 1; }
bash "$root/scripts/emunode/hosts.sh" --check || { echo "run scripts/setup.sh as root first" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

work=$(mktemp -d /tmp/evenflush-multinode-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT

launch() {  # the 2x2 launch line of tests/multinode.rs
  case "$1" in
    openmpi) echo mpirun.openmpi --mca plm_rsh_agent "$agent" --mca plm_rsh_no_tree_spawn 1 \
        --mca oob_tcp_if_include lo --mca btl self,tcp --mca btl_tcp_if_include lo \
        --host nodeA:2,nodeB:2 --bind-to none -x EVENFLUSH_CLOCK=monotonic -np 4 ;;
    mpich) echo mpiexec.mpich -launcher ssh -launcher-exec "$agent" -iface lo -hosts nodeA,nodeB \
        -ppn 2 -genv UCX_NET_DEVICES lo -genv FI_PROVIDER tcp -genv FI_TCP_IFACE lo \
        -genv EVENFLUSH_CLOCK monotonic -np 4 ;;
  esac
}

total_of() { sed -n 's/^total_s=//p' "$1" | tail -1; }
json() { /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
for k in sys.argv[2:]: d=d[k]
print(d)' "$@"; }

# median, min, max of the numbers on stdin
stats() { sort -g | awk '{v[NR]=$1} END {
  if (NR == 0) { print "nan nan nan"; exit }
  m = (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2; print m, v[1], v[NR] }'; }

for mpi in $mpis; do
  apps=$work/apps-$mpi
  bash "$root/workloads/build.sh" "$mpi" "$apps" >/dev/null
  prog=("$apps/iterative" --iterations "$iterations" --work-units "$units" --mem 0
        --record-bytes 65536 --records 4)
  : > "$work/$mpi.A"; : > "$work/$mpi.B"; : > "$work/$mpi.G"; : > "$work/$mpi.S"; : > "$work/$mpi.R"
  for rep in $(seq 1 "$reps"); do
    # A: untraced
    timeout 600 $(launch "$mpi") "${prog[@]}" > "$work/out" 2>&1 \
      || { echo "$mpi rep $rep: untraced run failed:" >&2; tail -20 "$work/out" >&2; exit 1; }
    a=$(total_of "$work/out"); echo "$a" >> "$work/$mpi.A"
    # B: traced
    trace=${keep:+$keep/$mpi-$rep}; trace=${trace:-$work/trace}
    rm -rf "$trace"
    timeout 600 "$evenflush" run --out "$trace" --threshold "$threshold" -- \
      $(launch "$mpi") "${prog[@]}" > "$work/out" 2>&1 \
      || { echo "$mpi rep $rep: traced run failed:" >&2; tail -20 "$work/out" >&2; exit 1; }
    b=$(total_of "$work/out"); echo "$b" >> "$work/$mpi.B"
    "$evenflush" info --json "$trace" > "$work/info.json"
    flushes=$(json "$work/info.json" suspension flushes)
    spread=$(json "$work/info.json" suspension spread_us p99)
    rm -rf "$work/rebuilt"
    "$evenflush" reconstruct --remove both --json --out "$work/rebuilt" "$trace" > "$work/rec.json"
    g=$(json "$work/rec.json" reconstructed_s)
    rm -rf "$work/replayed"
    "$evenflush" reconstruct --model replay --json --out "$work/replayed" "$trace" > "$work/rep.json"
    r=$(json "$work/rep.json" reconstructed_s)
    viol=$(json "$work/rep.json" hb violations_before)/$(json "$work/rep.json" hb violations_after)
    echo "$g" >> "$work/$mpi.G"; echo "$spread" >> "$work/$mpi.S"; echo "$r" >> "$work/$mpi.R"
    [ -n "$keep" ] || rm -rf "$trace"
    echo "$mpi rep $rep: untraced ${a}s traced ${b}s (${flushes} flushes) T(G) ${g}s replay ${r}s (violations before/after ${viol}) resume spread p99 ${spread} us"
  done
  read -r am amin amax < <(stats < "$work/$mpi.A")
  read -r bm bmin bmax < <(stats < "$work/$mpi.B")
  awk -v mpi="$mpi" -v k="$reps" -v am="$am" -v amin="$amin" -v amax="$amax" \
      -v bm="$bm" -v bmin="$bmin" -v bmax="$bmax" 'BEGIN {
    printf "%s (%d reps): untraced median %.3f s (spread %.3f-%.3f, %.1f %% of the median); " \
           "traced median %.3f s (%.3f-%.3f); traced/untraced %.2f\n",
           mpi, k, am, amin, amax, 100 * (amax - amin) / am, bm, bmin, bmax, bm / am }'
  read -r gm gmin gmax < <(stats < "$work/$mpi.G")
  read -r sm smin smax < <(stats < "$work/$mpi.S")
  read -r rm rmin rmax < <(stats < "$work/$mpi.R")
  awk -v mpi="$mpi" -v am="$am" -v rm="$rm" -v rmin="$rmin" -v rmax="$rmax" 'BEGIN {
    printf "%s: replayed T(G) median %.3f s (%.3f-%.3f), %+.1f %% against the untraced median\n",
           mpi, rm, rmin, rmax, 100 * (rm - am) / am }'
  awk -v mpi="$mpi" -v am="$am" -v gm="$gm" -v gmin="$gmin" -v gmax="$gmax" -v sm="$sm" -v smax="$smax" 'BEGIN {
    printf "%s: reconstructed T(G) median %.3f s (%.3f-%.3f), %+.1f %% against the untraced median; " \
           "resume spread p99 per run: median %.1f us, max %.1f us\n",
           mpi, gm, gmin, gmax, 100 * (gm - am) / am, sm, smax }'
done
