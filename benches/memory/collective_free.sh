#!/usr/bin/env bash
# The perturbation of each way to bound memory in a phase without collectives (the paper's open
# problem 1), against the untraced program: workloads/collective_free (2 ranks, K phases of
# N MPI_Sendrecv each, one MPI_Barrier per phase).
#
# Interleaved per repetition (U C L U C L ...):
#   U  untraced;
#   C  compress: --limit LIMIT --threshold LIMIT/2 (the default path: past the limit the buffers
#      are compressed in memory and written at the next flushing suspension);
#   L  local: --mode local --threshold LIMIT (a rank writes alone whenever it passes S, which is
#      what the hard limit did before in-memory compression).
# Each traced run is reconstructed (--remove both); per run: the program's span (end of MPI_Init to
# start of MPI_Finalize, rank 0, as the program prints it) and the reconstructed span.
# Reported: medians of traced/untraced and reconstructed/untraced per path, and the untraced
# spread (max/min - 1) as the noise floor.
#
# Usage: benches/memory/collective_free.sh [openmpi|mpich] [reps] (after cargo build --release)
#   env: N (default 1000000), K (2), WORK (2000 steps of arithmetic per exchange, ~2 us), LIMIT
#   (16MiB). Raw results: target/memory-bench/<mpi>.csv
set -euo pipefail
cd "$(dirname "$0")/../.."
mpi=${1:-openmpi}
reps=${2:-5}
n=${N:-1000000}
work_steps=${WORK:-2000}
k=${K:-2}
limit=${LIMIT:-16MiB}
ef=target/release/evenflush
work=target/memory-bench
py=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$work"
bash workloads/build.sh "$mpi" "$work/workloads-$mpi" >/dev/null
case "$mpi" in
openmpi) launch=(mpirun.openmpi --oversubscribe -np 2) ;;
mpich) launch=(mpirun.mpich -np 2) ;;
*) echo "usage: $0 [openmpi|mpich] [reps]" >&2; exit 2 ;;
esac
prog=("$work/workloads-$mpi/collective_free" --iterations "$n" --phases "$k" --work "$work_steps")
half=$($py -c "import sys; v=sys.argv[1]; u={'KiB':1<<10,'MiB':1<<20,'GiB':1<<30}; n=[x for x in u if v.endswith(x)]; print(int(float(v[:-3])*u[n[0]]/2) if n else int(v)//2)" "$limit")

span_of() { sed -n 's/.*span_s=\([0-9.]*\).*/\1/p' <<<"$1" | tail -1; }
rebuilt_of() { # trace dir -> reconstructed span (s)
  "$ef" reconstruct "$1" --remove both --json --out "$1.rebuilt" 2>/dev/null |
    $py -c "import json,sys; print(json.load(sys.stdin)['reconstructed_s'])"
  rm -rf "$1.rebuilt"
}
markers() { # trace dir -> in-memory compressions (all ranks), flushes made alone (rank 0)
  "$ef" info "$1" --json | $py -c "
import json,sys; i=json.load(sys.stdin)
alone = i['local_flushes'] + (i['suspension']['flushes'] if sys.argv[1] == 'local' else 0)
print(sum(r.get('in_memory_compressions',0) for r in i['per_rank']), alone)" "$2"
}

csv="$work/$mpi.csv"
echo "rep,path,span_s,reconstructed_s,compressions,flushes_alone" > "$csv"
for rep in $(seq 1 "$reps"); do
  out=$("${launch[@]}" "${prog[@]}")
  echo "$rep,untraced,$(span_of "$out"),,," >> "$csv"
  for path in compress local; do
    dir="$work/trace-$path"
    rm -rf "$dir" "$dir.rebuilt"
    case "$path" in
    compress) flags=(--limit "$limit" --threshold "$half") ;;
    local) flags=(--mode local --threshold "$limit" --limit "$limit") ;;
    esac
    out=$("$ef" run --out "$dir" "${flags[@]}" -- "${launch[@]}" "${prog[@]}" 2>/dev/null)
    read -r comp lf < <(markers "$dir" "$path")
    echo "$rep,$path,$(span_of "$out"),$(rebuilt_of "$dir"),$comp,$lf" >> "$csv"
  done
  echo "rep $rep done"
done
$py - "$csv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
by = {}
for r in rows:
    by.setdefault(r["rep"], {})[r["path"]] = r
u = [float(r["span_s"]) for r in rows if r["path"] == "untraced"]
print(f"untraced span: median {statistics.median(u):.3f} s, spread {max(u) / min(u) - 1:+.1%} (noise floor)")
for path in ("compress", "local"):
    traced = [float(v[path]["span_s"]) / float(v["untraced"]["span_s"]) for v in by.values()]
    rebuilt = [float(v[path]["reconstructed_s"]) / float(v["untraced"]["span_s"]) for v in by.values()]
    comp = statistics.median(int(v[path]["compressions"]) for v in by.values())
    lf = statistics.median(int(v[path]["flushes_alone"]) for v in by.values())
    print(f"{path:9s} traced/untraced {statistics.median(traced):.3f} (range {min(traced):.3f}-{max(traced):.3f}), "
          f"reconstructed/untraced {statistics.median(rebuilt):.3f} (range {min(rebuilt):.3f}-{max(rebuilt):.3f}); "
          f"in-memory compressions {comp} (all ranks), flushes made alone {lf} (rank 0), medians per run")
PY
