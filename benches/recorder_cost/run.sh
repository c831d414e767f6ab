#!/usr/bin/env bash
# Recorder cost per MPI event: 10^7 cheap calls of each kind (Comm_rank, Barrier on COMM_SELF,
# Isend/Irecv/Wait to self, Waitall of 26 requests, Allreduce on a split communicator, MPI_Test
# polls that find nothing, folded) in one
# process, without and with the preload library, for Open MPI and MPICH (tests/recorder_cost.rs
# is the short regression guard built on the same program). Prints ns/call for both (best of $RUNS runs, default 5: the
# machine is shared) and the difference; "self-meas." is the mean per-event cost the recorder
# itself stored in the trace of the last traced run (fast-path estimate plus measured slow paths:
# block allocation, so it varies with memory pressure); B/event is the in-memory bytes per event;
# stored/added is the median over runs of each traced run's stored mean cost over its own traced - bare.
# Usage: benches/recorder_cost/run.sh [calls]   (builds the release preload libraries first)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
calls="${1:-10000000}"
target="${CARGO_TARGET_DIR:-$root/target}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self
# Two commands: with --example, cargo builds only the example of the selected packages, so the
# preload libraries were not rebuilt and a stale library was measured.
(cd "$root" && cargo build --release -q -p preload-openmpi -p preload-mpich && cargo build --release -q -p recorder --example evf_count)

runs="${RUNS:-5}"

printf "%-8s %-8s %10s %10s %10s %14s %8s %16s\n" mpi call "bare ns" "traced ns" "cost ns" "self-meas.(last)" "B/event" "stored/added"
for mpi in openmpi mpich; do
    case "$mpi" in
        openmpi) cc=mpicc; lib="$target/release/libevenflush_openmpi.so" ;;
        mpich) cc=mpicc.mpich; lib="$target/release/libevenflush_mpich.so" ;;
    esac
    command -v "$cc" >/dev/null || { echo "$mpi: $cc not found, skipped"; continue; }
    "$cc" -O2 -o "$work/cheap_$mpi" "$here/cheap_calls.c"
    for kind in rank barrier isend waitall subcomm poll; do
        # The per-event cost the recorder itself measured and stored (sampled; excludes the two
        # clock reads around the PMPI call except one read's latency), averaged over the trace.
        # (call_cost_ns: without the first call after MPI_Init, which carries the recorder's
        # start-up, ~10 ns per call of a 2M-call run in mean_cost_ns.)
        # Folded polls store their cost per run: the mean per poll is the figure (poll_cost_ns).
        if [ "$kind" = poll ]; then pattern='/poll_cost_ns/ {print $6}'; else pattern='/call_cost_ns/ {print $4}'; fi
        out="$work/trace_${mpi}_$kind"
        # Bare and traced runs alternate; each traced run's stored cost is read from its own
        # trace, so the last column compares stored and added cost run by run (the machine's
        # speed drifts between runs by more than the cost's bias).
        : >"$work/runs"
        for _ in $(seq "$runs"); do
            bare="$("$work/cheap_$mpi" "$calls" "$kind" | awk '{print $2}')"
            rm -rf "$out"
            traced="$(env LD_PRELOAD="$lib" EVENFLUSH_OUT="$out" EVENFLUSH_MODE=off EVENFLUSH_VERBOSE=1 EVENFLUSH_ZSTD_LEVEL=1 \
                EVENFLUSH_THRESHOLD=4GiB EVENFLUSH_LIMIT=8GiB "$work/cheap_$mpi" "$calls" "$kind" 2>"$work/stderr" | awk '{print $2}')"
            stored="$("$target/release/examples/evf_count" "$out" | awk "$pattern" | head -1)"
            echo "$bare $traced ${stored:-nan}" >>"$work/runs"
        done
        # In-memory bytes per event, as the recorder counted them at finalize (last run).
        per_event="$(sed -n 's/.*(\([0-9.]*\) B\/event).*/\1/p' "$work/stderr" | head -1)"
        # Best (minimum) bare and traced ns/call: the machine is shared and noisy. Then the
        # median over runs of stored / (traced - bare), each run with its own pair.
        awk -v mpi="$mpi" -v kind="$kind" -v per_event="${per_event:-?}" -v last="${stored:-?}" '
            { b[NR] = $1; t[NR] = $2; s[NR] = $3
              if (NR == 1 || $1 < bb) bb = $1
              if (NR == 1 || $2 < bt) bt = $2
              added = $2 - $1
              r[NR] = (added > 0 && $3 != "nan") ? $3 / added : -1 }
            END {
                n = NR; for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (r[j] < r[i]) { x = r[i]; r[i] = r[j]; r[j] = x }
                med = (n % 2) ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2
                printf "%-8s %-8s %10s %10s %10.2f %14s %8s %16s\n", mpi, kind, bb, bt, bt - bb, last, per_event, (r[1] < 0 ? "?" : sprintf("%.2f", med))
            }' "$work/runs"
        rm -rf "$out"
    done
done
