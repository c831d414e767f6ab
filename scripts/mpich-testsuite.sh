#!/usr/bin/env bash
# Builds the programs of MPICH's own test suite that tests/mpich_testsuite.rs runs, for one MPI.
#   mpich-testsuite.sh build <openmpi|mpich>   compile what tests/mpich-testsuite/list names
#   mpich-testsuite.sh list <openmpi|mpich>    print "name ranks matching arg..." of each program, in
#                                              order (matching: all, or unmatched-sends)
# The sources are MPICH's test/mpi, which scripts/setup.sh fetches into target/mpich-testsuite/src
# (build exits with 3 when they are missing).
# Binaries go to target/mpich-testsuite/<mpi>/<dir>/<name>. A program is compiled again only when
# its compile command changed or one of its inputs is newer than the binary, so the test pays for
# the compiler once per source change, not once per run.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
here="$root/tests/mpich-testsuite"
suite="$root/target/mpich-testsuite/src/test/mpi"
self="$root/scripts/mpich-testsuite.sh"

usage() {
    echo "usage: $0 <build|list> <openmpi|mpich>" >&2
    exit 2
}
[ $# -eq 2 ] || usage
action=$1
mpi=$2
case "$mpi" in
openmpi) cc=${MPICC_OPENMPI:-mpicc.openmpi} ;;
mpich) cc=${MPICC_MPICH:-mpicc.mpich} ;;
*) usage ;;
esac

# One line of the list per program this MPI runs: "name ranks mpis options...", comments dropped.
entries() {
    sed -e 's/#.*//' "$here/list" | awk -v mpi="$mpi" '
        NF >= 3 {
            n = split($3, which, ",")
            for (i = 1; i <= n; i++) if (which[i] == mpi) { print; break }
        }'
}

if [ "$action" = list ]; then
    entries | while read -r name ranks _ options; do
        args=()
        matching=all
        for o in $options; do
            case "$o" in
            arg=*) args+=("${o#arg=}") ;;
            unmatched-sends) matching=$o ;;
            esac
        done
        echo "$name $ranks $matching ${args[*]}"
    done
    exit 0
fi
[ "$action" = build ] || usage

if [ ! -f "$suite/util/mtest.c" ]; then
    echo "MPICH's test suite is not in $suite: run scripts/setup.sh (it fetches the mpich source package)" >&2
    exit 3
fi
if ! command -v "$cc" >/dev/null 2>&1; then
    echo "compiler '$cc' for $mpi not found" >&2
    exit 1
fi

out="$root/target/mpich-testsuite/$mpi"
mkdir -p "$out/util"

# The suite is written for MPICH's own compiler settings; its warnings are not ours to fix, but a
# call to an undeclared function is an MPI function this library lacks and must not link by luck.
cflags=(-O1 -g -w -Werror=implicit-function-declaration -I"$here" -I"$suite/include")
if [ "$mpi" = openmpi ]; then
    # Open MPI 4.1 has MPI-4's persistent collectives only as MPIX_ extensions.
    cflags+=(-include "$here/openmpi-mpix.h")
fi
headers=("$here/mpitestconf.h" "$here/openmpi-mpix.h" "$suite"/include/*.h)

# True when $1 must be rebuilt: missing, its recorded command differs from $2, or any later
# argument is newer than it.
stale() {
    local target=$1 command=$2
    shift 2
    [ -f "$target" ] && [ -f "$target.cmd" ] || return 0
    [ "$(cat "$target.cmd")" = "$command" ] || return 0
    local dep
    for dep in "$@"; do
        [ "$dep" -nt "$target" ] && return 0
    done
    return 1
}

# Compiles in the background, at most one job per core; a failure is remembered, not fatal at once,
# so that one run reports every program that does not build.
jobs_max=$(nproc)
failed="$out/.failed"
: >"$failed"
compile() {
    local target=$1
    shift
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
    (
        if "$@" >"$target.log" 2>&1; then
            printf '%s\n' "$*" >"$target.cmd"
            rm -f "$target.log"
        else
            rm -f "$target" "$target.cmd"
            echo "$target" >>"$failed"
        fi
    ) &
}

util_objects=()
for u in mtest mtest_common dtypes mtest_thread; do
    obj="$out/util/$u.o"
    command=("$cc" "${cflags[@]}" -c "$suite/util/$u.c" -o "$obj")
    if stale "$obj" "${command[*]}" "$suite/util/$u.c" "${headers[@]}" "$self"; then
        compile "$obj" "${command[@]}"
    fi
    util_objects+=("$obj")
done
wait
if [ -s "$failed" ]; then
    echo "building MPICH's test utilities for $mpi failed:" >&2
    while read -r t; do cat "$t.log" >&2; done <"$failed"
    exit 1
fi

built=0
while read -r name _ _ options; do
    dir=${name%/*}
    base=${name##*/}
    src="$suite/$dir/$base.c"
    extra=()
    for o in $options; do
        case "$o" in
        src=*) src="$suite/$dir/${o#src=}.c" ;;
        -D*) extra+=("$o") ;;
        arg=* | unmatched-sends) ;;
        *)
            echo "list: $name: unknown option '$o'" >&2
            exit 1
            ;;
        esac
    done
    mkdir -p "$out/$dir"
    target="$out/$name"
    command=("$cc" "${cflags[@]}" "${extra[@]}" -o "$target" "$src" "${util_objects[@]}" -lm -lpthread)
    if stale "$target" "${command[*]}" "$src" "${headers[@]}" "${util_objects[@]}" "$self"; then
        compile "$target" "${command[@]}"
        built=$((built + 1))
    fi
done < <(entries)
wait
if [ -s "$failed" ]; then
    echo "these programs of MPICH's test suite do not build for $mpi:" >&2
    while read -r t; do
        echo "--- ${t#"$out"/}" >&2
        head -n 20 "$t.log" >&2
    done <"$failed"
    exit 1
fi
echo "mpich-testsuite: $built program(s) compiled for $mpi in $out"
