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
cargo test --release --workspace
