#!/usr/bin/env bash
# Installs what evenflush needs from Debian, once. Safe to run again: packages already present are
# skipped, and apt-get update runs only when a package is not known to apt yet.
set -euo pipefail

packages=(
  build-essential pkg-config
  openmpi-bin libopenmpi-dev          # Open MPI: mpicc, mpirun (Debian's default MPI)
  mpich libmpich-dev                  # MPICH: mpicc.mpich, mpirun.mpich
  gfortran                            # the Fortran test program
  libopen-trace-format2-dev otf2-tools python3-otf2   # OTF2 export and its checkers
  zstd                                # inspecting compressed chunks by hand
  fonts-dejavu-core                   # the font of every PNG (timeline, validate, simulator plots): DejaVuSans.ttf
  python3-mpi4py                      # a real MPI program nobody here wrote (tests)
  lammps                              # a real application: tests/lammps.rs, the fidelity bench
  python3-pip                         # the perfetto Python package below
  chromium                            # a real browser opens the Chrome JSON export (tests/browser.rs)
  dpkg-dev                            # apt-get source: MPICH's test suite (tests/mpich_testsuite.rs)
  lmod                                # loads the installed module files (tests/install.rs)
  slurm-wlm munge                     # a private one-node Slurm cluster (scripts/slurm-cluster.sh, tests/slurm.rs)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages already installed"
else
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing packages (${missing[*]}) and not root: install them with apt-get as root" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  # A fresh machine has empty package lists; update only when apt does not know a package.
  for p in "${missing[@]}"; do
    if ! apt-cache show "$p" >/dev/null 2>&1; then
      echo "setup: apt-get update (package lists do not know $p)"
      apt-get update -q
      break
    fi
  done
  echo "setup: installing ${missing[*]}"
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/tmp/evenflush-setup-apt.log 2>&1 || {
    echo "setup: apt-get install failed; last lines of /tmp/evenflush-setup-apt.log:" >&2
    tail -n 30 /tmp/evenflush-setup-apt.log >&2
    exit 1
  }
  echo "setup: installed ${missing[*]}"
fi

# Perfetto's own protobuf classes (perfetto_trace_pb2) decode the native Perfetto export in
# tests/views.rs. Not packaged by Debian: from the Python package index, into Debian's Python
# (/usr/bin/python3, which the tests run, whatever python3 comes first on PATH).
if ! /usr/bin/python3 -c 'import perfetto.protos.perfetto.trace.perfetto_trace_pb2' 2>/dev/null; then
  echo "setup: pip install perfetto"
  /usr/bin/python3 -m pip install -q --break-system-packages perfetto >/tmp/evenflush-setup-pip.log 2>&1 || {
    echo "setup: pip install perfetto failed; last lines of /tmp/evenflush-setup-pip.log:" >&2
    tail -n 30 /tmp/evenflush-setup-pip.log >&2
    exit 1
  }
fi

# speedscope, a trace viewer that opens Chrome trace JSON offline, from the npm registry; pinned.
# npm comes with Debian's npm package unless a node installation already provides it.
speedscope_dir=/var/cache/evenflush/speedscope
if [ ! -f "$speedscope_dir/node_modules/speedscope/dist/release/index.html" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "setup: installing npm"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends npm >/tmp/evenflush-setup-apt.log 2>&1 || {
      tail -n 30 /tmp/evenflush-setup-apt.log >&2
      exit 1
    }
  fi
  echo "setup: npm install speedscope"
  mkdir -p "$speedscope_dir"
  npm install --silent --no-audit --no-fund --prefix "$speedscope_dir" speedscope@1.25.0 >/tmp/evenflush-setup-npm.log 2>&1 || {
    echo "setup: npm install speedscope failed; last lines of /tmp/evenflush-setup-npm.log:" >&2
    tail -n 30 /tmp/evenflush-setup-npm.log >&2
    exit 1
  }
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found: install a stable Rust toolchain (rustup) first" >&2
  exit 1
fi

# The emulated nodes of tests/multinode.rs (scripts/emunode): their names must resolve to their
# loopback addresses. Added to /etc/hosts once; needs root like the packages above.
if ! bash "$(dirname "${BASH_SOURCE[0]}")/emunode/hosts.sh" --check 2>/dev/null; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: the emulated nodes (scripts/emunode/nodes) are not in /etc/hosts and not root: run scripts/emunode/hosts.sh as root" >&2
    exit 1
  fi
  bash "$(dirname "${BASH_SOURCE[0]}")/emunode/hosts.sh"
fi

# MPICH's own test suite (test/mpi of its source package), which tests/mpich_testsuite.rs runs with
# and without the recorder. Only test/mpi of Debian's source is kept, under target/ (not in git).
# Source packages need a deb-src entry: one is derived from the machine's first deb entry, so it
# names the same mirror, suites and key. Failing to fetch (no network) is not fatal here: the test
# then fails on its own unless EVENFLUSH_TEST_ALLOW_SKIP names mpich-testsuite.
mpich_tests="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/target/mpich-testsuite/src"
fetch_mpich_tests() {
  local log=/tmp/evenflush-setup-src.log src_list=/etc/apt/sources.list.d/evenflush-src.sources
  : >"$log"
  if [ "$(id -u)" -ne 0 ]; then
    echo "not root: cannot add a deb-src entry" >>"$log"
    return 1
  fi
  if [ ! -f "$src_list" ]; then
    if [ -f /etc/apt/sources.list.d/debian.sources ]; then
      # The first stanza whose Types include deb, with Types replaced by deb-src.
      awk 'BEGIN { RS = "" }
           !done {
             n = split($0, lines, "\n"); binary = 0
             for (i = 1; i <= n; i++)
               if (lines[i] ~ /^Types:/ && (" " substr(lines[i], 7) " ") ~ /[ \t]deb[ \t]/) binary = 1
             if (!binary) next
             for (i = 1; i <= n; i++)
               if (lines[i] ~ /^Types:/) print "Types: deb-src"
               else if (lines[i] !~ /^#/) print lines[i]
             done = 1
           }' /etc/apt/sources.list.d/debian.sources >"$src_list.tmp"
    elif [ -f /etc/apt/sources.list ]; then
      # One-line format: its plain deb lines again as deb-src stanzas.
      grep -E '^deb[[:space:]]+[^[]' /etc/apt/sources.list |
        sed -E 's/^deb[[:space:]]+([^[:space:]]+)[[:space:]]+([^[:space:]]+)[[:space:]]+(.*)$/Types: deb-src\nURIs: \1\nSuites: \2\nComponents: \3\n/' >"$src_list.tmp"
    fi
    if ! grep -q '^URIs:' "$src_list.tmp" 2>/dev/null; then
      rm -f "$src_list.tmp"
      echo "no deb entry in the apt sources to derive a deb-src entry from" >>"$log"
      return 1
    fi
    mv "$src_list.tmp" "$src_list"
  fi
  local download
  download="$(mktemp -d)"
  # Package lists without the new deb-src entry do not know the source package: update once then.
  if ! (cd "$download" && apt-get source -q --download-only mpich >>"$log" 2>&1); then
    apt-get update -q >>"$log" 2>&1 &&
      (cd "$download" && apt-get source -q --download-only mpich >>"$log" 2>&1) || {
      rm -rf "$download"
      return 1
    }
  fi
  local orig
  orig="$(ls "$download"/mpich_*.orig.tar.* 2>/dev/null | head -n 1)"
  rm -rf "$mpich_tests.tmp"
  mkdir -p "$mpich_tests.tmp"
  # Only test/mpi, without the upstream top directory (mpich-4.0.2/).
  if [ -z "$orig" ] || ! tar -xf "$orig" -C "$mpich_tests.tmp" --strip-components=1 --wildcards '*/test/mpi/*' >>"$log" 2>&1; then
    rm -rf "$download" "$mpich_tests.tmp"
    return 1
  fi
  rm -rf "$download" "$mpich_tests"
  mv "$mpich_tests.tmp" "$mpich_tests"
}
if [ ! -f "$mpich_tests/test/mpi/util/mtest.c" ]; then
  echo "setup: fetching MPICH's test suite (apt-get source mpich) into $mpich_tests"
  if fetch_mpich_tests; then
    echo "setup: MPICH's test suite is in $mpich_tests/test/mpi"
  else
    echo "setup: WARNING: could not fetch MPICH's test suite; tests/mpich_testsuite.rs will fail unless" \
      "EVENFLUSH_TEST_ALLOW_SKIP has mpich-testsuite. Last lines of /tmp/evenflush-setup-src.log:" >&2
    tail -n 10 /tmp/evenflush-setup-src.log >&2
  fi
fi
