#!/usr/bin/env bash
# The fidelity matrix of paper-notes/fidelity.md: `evenflush validate` (untraced and traced runs
# interleaved, each traced run reconstructed, T(G) against the untraced time with its 95 % interval
# and the untraced noise floor) on every workload of the matrix.
#   benches/fidelity/run.sh [openmpi|mpich] [reps] [workload ...]
# Workloads: iterative-off (the in-memory reference, --mode off: only DP to remove) iterative-64m
# iterative-8m iterative-1m halo polling polling-overlap lammps hpcc (default: all). Each writes
# target/fidelity/<mpi>-<workload>.json (validate --json) and .png; the last lines print the table.
# LAMMPS is Debian's `lammps` package, hpcc Debian's HPC Challenge benchmark `hpcc` (HPL, PTRANS,
# RandomAccess, FFT, ... at N = 1200 on a 1 x 2 grid; 40 M MPI calls, mostly MPI_Test/Testany
# polling; hpcc-nopoll leaves MPI_Test, MPI_Testany and MPI_Iprobe out with --exclude); both Open
# MPI only, installed here on first use.
# KEEP=1 keeps every traced run's trace (validate --keep) under target/fidelity/validate-<mpi>-<w>/,
# for benches/fidelity/ab.py, which compares two builds' reconstructions on those same traces.
# Run it on a quiet machine: anything else running widens the noise floor.
set -euo pipefail
cd "$(dirname "$0")/../.."
mpi=${1:-openmpi}
reps=${2:-5}
shift $(( $# > 2 ? 2 : $# )) || true
workloads=("$@")
[ ${#workloads[@]} -gt 0 ] || workloads=(iterative-off iterative-64m iterative-8m iterative-1m halo polling polling-overlap lammps hpcc)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cargo build --release --workspace --quiet
ef=$PWD/target/release/evenflush
out=$PWD/target/fidelity
apps=$out/apps-$mpi
mkdir -p "$out"
bash workloads/build.sh "$mpi" "$apps" >/dev/null
case "$mpi" in
openmpi) mpirun=(mpirun.openmpi --oversubscribe -np 2) ;;
# Both bind each rank to a core, as a batch job does: Open MPI does by default for 2 ranks,
# MPICH's launcher binds nothing unless asked (unbound ranks sleep through the pauses and run
# the work after them slower, which no model removes; paper-notes/fidelity.md).
mpich) mpirun=(mpirun.mpich -bind-to core -np 2) ;;
*) echo "usage: $0 [openmpi|mpich] [reps] [workload ...]" >&2; exit 2 ;;
esac
# The issue's iterative shape: ~1 ms of register-only compute and 64 KiB of user records per
# iteration, 2 ranks, ~1.5 s.
iterative=("$apps/iterative" --iterations 1200 --work-units 80000 --mem 0 --record-bytes 65536)

for w in "${workloads[@]}"; do
  extra=()
  case "$w" in
  iterative-off) cmd=("${iterative[@]}"); extra=(--mode off) ;;
  iterative-64m) cmd=("${iterative[@]}"); extra=(--threshold 64MiB) ;;
  iterative-8m) cmd=("${iterative[@]}"); extra=(--threshold 8MiB) ;;
  iterative-1m) cmd=("${iterative[@]}"); extra=(--threshold 1MiB) ;;
  halo) cmd=("$apps/halo" --iterations 200000 --cells 4096); extra=(--threshold 256KiB) ;;
  # Polling loops (MPI_Test, MPI_Iprobe, MPI_Testsome) against a late sender, ~1.2 s.
  polling) cmd=("$apps/polling" --rounds 2000 --spin 200); extra=(--threshold 1MiB) ;;
  # Loops that compute and poll, ended by the program, not a partner (tests/validate.rs), ~0.3 s.
  polling-overlap) cmd=("$apps/polling" --rounds 10 --spin 0 --overlap 200000 --overlap-work 60) ;;
  lammps)
    if [ "$mpi" != openmpi ]; then echo "lammps: Debian builds it with Open MPI only; skipped"; continue; fi
    command -v lmp >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq lammps >/dev/null
    sed 's/^run[[:space:]].*/run 1500/' workloads/melt.lammps > "$out/in.melt"
    cmd=(lmp -log none -screen none -in "$out/in.melt"); extra=(--threshold 8KiB --decision-interval 0) ;;
  hpcc | hpcc-nopoll)
    if [ "$mpi" != openmpi ]; then echo "hpcc: Debian builds it with Open MPI only; skipped"; continue; fi
    command -v hpcc >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq hpcc >/dev/null
    # Debian's example input on a 1 x 2 process grid, problem size 1200 (~3.5 s untraced here).
    sed -e 's/^[0-9]*\( *\)Ns$/1200\1Ns/' -e 's/^[0-9]*\( *\)Ps$/1\1Ps/' -e 's/^[0-9]*\( *\)Qs$/2\1Qs/' \
      /usr/share/doc/hpcc/examples/_hpccinf.txt > "$out/hpccinf.txt"
    cmd=("$PWD/benches/fidelity/hpcc-rank.sh"); extra=(--threshold 8MiB)
    # hpcc-nopoll: the same without its polls (unsuccessful or not) in the trace.
    [ "$w" = hpcc-nopoll ] && extra+=(--exclude 'MPI_Test,MPI_Testany,MPI_Iprobe') ;;
  *) echo "unknown workload $w" >&2; exit 2 ;;
  esac
  echo "== $mpi $w (${extra[*]}, $reps pairs)" >&2
  keep=()
  [ "${KEEP:-0}" = 1 ] && keep=(--keep)
  (cd "$out" && "$ef" validate "${keep[@]}" --reps "$reps" --work "validate-$mpi-$w" --mpi "$mpi" \
    --png "$out/$mpi-$w.png" --json "${extra[@]}" -- "${mpirun[@]}" "${cmd[@]}") \
    > "$out/$mpi-$w.json"
done
python3 - "$out" "$mpi" "${workloads[@]}" <<'PY'
import json, sys, os
out, mpi, names = sys.argv[1], sys.argv[2], sys.argv[3:]
pct = lambda e: f"{100*e['error']:+.2f} % [{100*e['ci_low']:+.2f}, {100*e['ci_high']:+.2f}]"
print(f"| workload ({mpi}) | pairs | untraced median | noise floor | flushes | traced | T(G+) | T(G) subtract | T(G) + hb repair | T(G) replay |")
print("|---|---|---|---|---|---|---|---|---|---|")
for n in names:
    p = os.path.join(out, f"{mpi}-{n}.json")
    if not os.path.exists(p):
        continue
    v = json.load(open(p))
    print(f"| {n} | {v['reps']} | {v['untraced_median_s']:.3f} s | {100*v['untraced_spread']:.2f} % "
          f"| {v['flushes_median']} | {pct(v['traced'])} | {pct(v['reconstructed_plus'])} "
          f"| {pct(v['reconstructed'])} | {pct(v['reconstructed_causal'])} "
          f"| {pct(v['reconstructed_replay'])} |")
PY
