#!/usr/bin/env bash
# Build the experiment workloads for one MPI implementation.
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
cflags=(-O2 -g -Wall -Wextra -std=c11)

echo "building experiment apps for $flavour into $outdir"
echo "  CC  iterative"
"$cc" "${cflags[@]}" -o "$outdir/iterative" "$src/iterative.c" -ldl
echo "  CC  himeno"
"$cc" "${cflags[@]}" -o "$outdir/himeno" "$src/himeno.c"
echo "done"
