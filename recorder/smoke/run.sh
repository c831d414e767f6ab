#!/usr/bin/env bash
# Smoke test of the preload recorder with real 2-rank jobs: C (smoke.c, coverage.c), Fortran
# `use mpi` and `use mpi_f08`, under Open MPI and MPICH; reads the rank files back with the format
# reader (example evf_count) and checks exact counts. Also checks abnormal ends and the hard limit.
# Usage: recorder/smoke/run.sh   (exit status 0 = all checks passed)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 TMPDIR="$work"
(cd "$root" && cargo build --release -q -p preload-openmpi -p preload-mpich -p recorder --example evf_count) || exit 1
count="$target/release/examples/evf_count"
failures=0

expect() { # expect <counts file> <pattern> <description>
    if grep -qx "$2" "$1"; then echo "  ok   $3"; else echo "  FAIL $3 (wanted line: $2)"; failures=$((failures + 1)); fi
}

run() { # run <mpi> <out dir> <program> [args...]
    local mpi="$1" out="$2"
    shift 2
    case "$mpi" in
        openmpi) timeout 120 mpirun --oversubscribe -np 2 -x LD_PRELOAD="$target/release/libevenflush_openmpi.so" \
            -x EVENFLUSH_OUT="$out" -x EVENFLUSH_LIMIT -x EVENFLUSH_THRESHOLD "$@" ;;
        mpich) timeout 120 mpirun.mpich -np 2 -genv LD_PRELOAD "$target/release/libevenflush_mpich.so" \
            -genv EVENFLUSH_OUT "$out" "$@" ;;
    esac >"$work/stdout" 2>"$work/stderr"
}

for mpi in openmpi mpich; do
    case "$mpi" in
        openmpi) cc=mpicc fc=mpif90 ;;
        mpich) cc=mpicc.mpich fc=mpif90.mpich ;;
    esac
    command -v "$cc" >/dev/null || { echo "$mpi: not installed, skipped"; continue; }
    echo "== $mpi"
    "$cc" -O2 -o "$work/smoke_$mpi" "$here/smoke.c" -ldl 2>/dev/null
    "$cc" -O2 -o "$work/coverage_$mpi" "$here/coverage.c" 2>/dev/null
    "$cc" -O2 -o "$work/abnormal_$mpi" "$here/abnormal.c" -lpthread 2>/dev/null

    run "$mpi" "$work/t_smoke_$mpi" "$work/smoke_$mpi"
    "$count" "$work/t_smoke_$mpi" >"$work/c"
    expect "$work/c" "rank 0 call MPI_Send 100 4000" "C: 100 MPI_Send of 40 bytes on rank 0"
    expect "$work/c" "rank 1 call MPI_Recv 100 25600" "C: 100 MPI_Recv (ANY_SOURCE) on rank 1"
    expect "$work/c" "rank 0 call MPI_Waitall 110 0" "C: 110 MPI_Waitall"
    expect "$work/c" "rank 0 call MPI_Startall 20 0" "C: Startall records one call per started request"
    expect "$work/c" "rank 0 completions 220 3200" "C: rank 0 completions with actual sizes"
    expect "$work/c" "rank 1 completions 320 7200" "C: rank 1 completions incl. blocking receives"
    expect "$work/c" "rank 1 commdefs 4" "C: WORLD, SELF, split, dup defined (dup after free gets a new id)"
    expect "$work/c" "rank 0 user 3" "C: user record and region via dlsym"
    expect "$work/c" "rank 0 marker InitDone 1" "C: InitDone marker"
    expect "$work/c" "rank 1 marker FinalizeStart 1" "C: FinalizeStart marker"

    run "$mpi" "$work/t_cov_$mpi" "$work/coverage_$mpi"
    "$count" "$work/t_cov_$mpi" >"$work/c"
    expect "$work/c" "rank 0 completions 18 468" "coverage: Wait/Test families, rank 0"
    expect "$work/c" "rank 1 completions 18 476" "coverage: Wait/Test families, rank 1"
    expect "$work/c" "rank 0 call MPI_Gather 1 0" "coverage: MPI_IN_PLACE gather counts 0 bytes"
    expect "$work/c" "rank 0 call MPI_Alltoallv 1 24" "coverage: Alltoallv sums send counts"
    expect "$work/c" "rank 1 commdefs 3" "coverage: Cartesian communicator defined"

    for f in smoke_f77 smoke_f08; do
        "$fc" -O1 -o "$work/${f}_$mpi" "$here/$f.f90" 2>/dev/null || { echo "  FAIL compiling $f"; failures=$((failures + 1)); continue; }
        run "$mpi" "$work/t_${f}_$mpi" "$work/${f}_$mpi"
        "$count" "$work/t_${f}_$mpi" >"$work/c"
        expect "$work/c" "rank 1 call MPI_Irecv 50 2000" "$f: 50 MPI_Irecv"
        expect "$work/c" "rank 1 call MPI_Recv 50 2000" "$f: 50 MPI_Recv"
        expect "$work/c" "rank 0 call MPI_Allreduce 50 400" "$f: 50 MPI_Allreduce (IN_PLACE)"
        expect "$work/c" "rank 1 completions 150 2000" "$f: completions with STATUSES_IGNORE substituted"
        expect "$work/c" "rank 0 call MPI_Init 1 0" "$f: Fortran MPI_Init recorded once"
    done

    for mode in abort exit term; do
        run "$mpi" "$work/t_${mode}_$mpi" "$work/abnormal_$mpi" "$mode" 1000
        "$count" "$work/t_${mode}_$mpi" >"$work/c"
        expect "$work/c" "rank 0 call MPI_Barrier 1000 0" "$mode: events written without MPI_Finalize"
        expect "$work/c" "rank 0 marker AbnormalEnd 1" "$mode: AbnormalEnd marker"
    done
    run "$mpi" "$work/t_threads_$mpi" "$work/abnormal_$mpi" threads 20000
    "$count" "$work/t_threads_$mpi" >"$work/c"
    expect "$work/c" "rank 1 call MPI_Comm_rank 100001 0" "threads: 5 threads x 20000 MPI_Comm_rank + 1"
    expect "$work/c" "rank 1 streams 5" "threads: one stream per thread"
done

echo "== hard limit (Open MPI, 1 rank)"
if command -v mpicc >/dev/null; then
    EVENFLUSH_LIMIT=4MiB EVENFLUSH_THRESHOLD=1MiB run openmpi "$work/t_limit" "$work/abnormal_openmpi" limit 300000
    "$count" "$work/t_limit" >"$work/c"
    expect "$work/c" "rank 0 call MPI_Barrier 300000 0" "limit: nothing lost"
    grep -q "marker LocalFlush" "$work/c" && echo "  ok   limit: LocalFlush marked" || { echo "  FAIL no LocalFlush"; failures=$((failures + 1)); }
    grep -q "reached the limit" "$work/stderr" && echo "  ok   limit: warned on stderr" || { echo "  FAIL no warning"; failures=$((failures + 1)); }
fi

echo "== inert outside MPI"
out="$(LD_PRELOAD="$target/release/libevenflush_openmpi.so" bash -c 'echo hi' 2>&1)"
[ "$out" = hi ] && echo "  ok   bash under LD_PRELOAD prints nothing extra" || { echo "  FAIL bash output: $out"; failures=$((failures + 1)); }

echo "failures: $failures"
exit $((failures > 0))
