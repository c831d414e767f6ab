#!/usr/bin/env bash
# The recorder's smoke checks now live in the integration tests (tests/smoke.rs, programs in
# tests/programs/): this runs them under Open MPI and MPICH.
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec cargo test --release --test smoke "$@"
