#!/usr/bin/env bash
# Build every bundled test program for one MPI implementation. The programs the tests share with
# the demo and the benches (halo, polling, ...) are in workloads/, built by its own build.sh.
#   build.sh <openmpi|mpich> <outdir>
# Open MPI uses mpicc/mpif90, MPICH uses mpicc.mpich/mpif90.mpich. The
# compilers can be overridden with MPICC / MPIF90 (e.g. for another install).
set -euo pipefail

usage() {
    echo "usage: $0 <openmpi|mpich> <outdir>" >&2
    exit 2
}
[ $# -eq 2 ] || usage
flavour=$1
outdir=$2
case "$flavour" in
openmpi) cc=${MPICC:-mpicc} fc=${MPIF90:-mpif90} ;;
mpich) cc=${MPICC:-mpicc.mpich} fc=${MPIF90:-mpif90.mpich} ;;
*) usage ;;
esac
for tool in "$cc" "$fc"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "error: compiler '$tool' for $flavour not found in PATH" >&2
        exit 1
    fi
done

src=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# common.h, the helpers of every bundled program, is the workloads'.
workloads=$(cd "$src/../../workloads" && pwd)
mkdir -p "$outdir"
# Each Fortran build writes .mod files into its own scratch directory so
# two builds (one per MPI) can run side by side without clobbering.
moddir=$(mktemp -d)
trap 'rm -rf "$moddir"' EXIT

cflags=(-O2 -g -Wall -Wextra -std=c11 -I"$workloads")
fflags=(-O2 -g -Wall -J"$moddir")

build_c() {
    local name=$1
    shift
    echo "  CC  $name"
    "$cc" "${cflags[@]}" -o "$outdir/$name" "$src/$name.c" "$@"
}
build_f() {
    local name=$1
    echo "  FC  $name"
    "$fc" "${fflags[@]}" -o "$outdir/$name" "$src/$name.f90"
}

echo "building test programs for $flavour into $outdir"
build_c ring
build_c collectives
build_c split
build_c anysource
build_c threads -pthread
build_c worker_barrier -pthread -ldl
build_c user_records -ldl
build_c sigterm
build_c deadlock
build_c pcontrol
build_c in_status
build_c cancel
build_f fortran_ring
build_f fortran_f08
# The recorder's smoke programs (tests/smoke.rs): every wrapped family, abnormal ends, Fortran.
# GCC mistakes MPICH's MPI_STATUSES_IGNORE for a zero-sized status array.
build_c smoke -ldl -Wno-stringop-overflow
build_c coverage -Wno-stringop-overflow
build_c matching -Wno-stringop-overflow
build_c rma_io
build_c pscw
build_c commorder -Wno-stringop-overflow
build_c abnormal -pthread
build_f smoke_f77
build_f smoke_f08
# MPI-4 classes (tests/smoke.rs mpi4, sessions); each uses what its MPI has.
build_c mpi4 -Wno-stringop-overflow
build_c sessions
build_c partitioned
build_c sessions_edge
# Memory samples in a phase without MPI calls (tests/memory_recorder.rs).
build_c idle_phase
# Recorder hardening (tests/hardening.rs): signals, fork, spawn, comm frees at depth.
build_c hardening -pthread
# Not an MPI program: the LD_PRELOAD fault injector of the disk-error tests.
echo "  CC  faultfs.so"
"${CC:-cc}" -O2 -Wall -Wextra -shared -fPIC -o "$outdir/faultfs.so" "$src/faultfs.c" -ldl
echo "done"
