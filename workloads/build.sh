#!/usr/bin/env bash
# Build the bundled workloads for one MPI implementation: the programs that the integration tests,
# the demo (scripts/demo.sh), the benches (benches/) and the swap experiment share. Programs used by
# the tests alone are in tests/programs/ (their build.sh).
#   build.sh <openmpi|mpich> <outdir>
# Open MPI uses mpicc, MPICH uses mpicc.mpich; MPICC overrides the compiler.
set -euo pipefail

usage() {
    echo "usage: $0 <openmpi|mpich> <outdir>" >&2
    exit 2
}
[ $# -eq 2 ] || usage
flavour=$1
outdir=$2
case "$flavour" in
openmpi) cc=${MPICC:-mpicc} ;;
mpich) cc=${MPICC:-mpicc.mpich} ;;
*) usage ;;
esac
if ! command -v "$cc" >/dev/null 2>&1; then
    echo "error: compiler '$cc' for $flavour not found in PATH" >&2
    exit 1
fi

src=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$outdir"
cflags=(-O2 -g -Wall -Wextra -std=c11 -I"$src")

build_c() {
    local name=$1
    shift
    echo "  CC  $name"
    "$cc" "${cflags[@]}" -o "$outdir/$name" "$src/$name.c" "$@"
}

echo "building the workloads for $flavour into $outdir"
# Compute, user records, barrier: the paper's program 1 (demo, benches, swap experiment, tests).
build_c iterative -ldl
build_c himeno
# Halo exchange and a polling loop (benches/fidelity, tests), phases without collectives
# (benches/memory, tests).
build_c halo
build_c polling
build_c collective_free
echo "done"
