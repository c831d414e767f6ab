#!/usr/bin/env bash
# Checks the OTF2 export against Pipit (https://github.com/hpcgroup/pipit), a Python trace-analysis
# library users feed OTF2 to: exports TRACE_DIR as OTF2, reads it with `pipit.Trace.from_otf2`, and
# compares Pipit's communication matrix (by count and by bytes) and message-size histogram with
# `evenflush report --json` of the same trace (pipit_check.py says how). Prints the comparison as
# JSON; exits 1 on a disagreement.
#
# Usage: benches/views/pipit_check.sh TRACE_DIR [OUT_DIR]   (after cargo build --release)
#
# Pipit is not on PyPI (the "pipit" there is an unrelated placeholder) and scripts/setup.sh does not
# fetch it, so this is a harness, not a test. Point PIPIT_PYTHON at a Python that imports pipit,
# numpy, pandas and Debian's python3-otf2, e.g. a venv made with
#   /usr/bin/python3 -m venv --system-site-packages VENV
#   VENV/bin/pip install numpy pandas && VENV/bin/pip install --no-deps PIPIT_CHECKOUT
# and PIPIT_PYTHON=VENV/bin/python.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
[ $# -ge 1 ] || { echo "usage: $0 TRACE_DIR [OUT_DIR]" >&2; exit 2; }
trace=$1
out=${2:-$(mktemp -d)}
python=${PIPIT_PYTHON:-python3}
if ! "$python" -c 'import pipit, otf2' 2>/dev/null; then
  echo "$python cannot import pipit and otf2: set PIPIT_PYTHON (see the header of $0)" >&2
  exit 1
fi
evenflush="${CARGO_TARGET_DIR:-$root/target}/release/evenflush"
mkdir -p "$out"
"$evenflush" export "$trace" --format otf2 --out "$out/otf2" >&2
"$evenflush" report "$trace" --json >"$out/report.json"
"$python" "$here/pipit_check.py" "$out/otf2" "$out/report.json"
