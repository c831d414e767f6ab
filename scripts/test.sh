#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs what it needs, builds the preload libraries for every
# installed MPI, checks formatting and lints, then runs every test (unit, property, corruption and the
# integration tests that launch real mpirun jobs under Open MPI and MPICH).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo build --release (CLI + one preload library per installed MPI)"
cargo build --release --workspace
echo "== cargo clippy"
cargo clippy --release --workspace --all-targets -- -D warnings
echo "== cargo test"
# A test that cannot exercise its feature fails unless EVENFLUSH_TEST_ALLOW_SKIP names it
# (tests/common/skip.rs); the skips that were allowed are listed at the end, so a green run says
# what it did not test.
# Debian's MPICH 4.0.2 (ch4:ucx) cannot run MPI_Comm_spawn at all, with or without the recorder
# (tests/hardening.rs checks that first): that one known platform gap is allowed by default, and
# still listed below as a skip.
export EVENFLUSH_TEST_ALLOW_SKIP="${EVENFLUSH_TEST_ALLOW_SKIP:+$EVENFLUSH_TEST_ALLOW_SKIP,}mpich-spawn"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
cargo test --release --workspace --no-fail-fast 2>&1 | tee "$log" || status=$?
# -o: with one test thread, libtest prints "test name ... " before the test writes its line.
skips="$(grep -ao 'SKIPPED:.*' "$log" | sort | uniq -c || true)"
if [ -n "$skips" ]; then
    echo "== allowed skips (EVENFLUSH_TEST_ALLOW_SKIP=${EVENFLUSH_TEST_ALLOW_SKIP:-})"
    echo "$skips"
else
    echo "== no test skipped"
fi
exit "$status"

