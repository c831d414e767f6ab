#!/usr/bin/env bash
# Installs evenflush into a prefix, as a site does:
#   PREFIX/bin/evenflush                         the command (finds its libraries in ../lib/evenflush)
#   PREFIX/lib/evenflush/libevenflush_MPI.so     one preload library per MPI the build found
#   PREFIX/share/man/man1/evenflush*.1           man pages       } written by the installed binary
#   PREFIX/share/bash-completion/completions/... completions     } from its own command line
#   PREFIX/share/modulefiles/evenflush/VERSION.lua   Lmod module (Lua), prefix filled in
#   PREFIX/share/modulefiles-tcl/evenflush/VERSION   Environment Modules / Lmod module (Tcl)
#
# Usage: scripts/install.sh --prefix DIR [--destdir STAGE] [--no-build]
#   --destdir  writes into STAGE/DIR while every path inside the files says DIR (packaging: deb.sh)
#   --no-build uses target/release as it is (the tests: no cargo run inside a test)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

prefix=""
destdir=""
build=1
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix="${2:?--prefix needs a directory}"; shift 2 ;;
    --prefix=*) prefix="${1#--prefix=}"; shift ;;
    --destdir) destdir="${2:?--destdir needs a directory}"; shift 2 ;;
    --destdir=*) destdir="${1#--destdir=}"; shift ;;
    --no-build) build=0; shift ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "install.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$prefix" ] || { echo "install.sh: --prefix DIR is required" >&2; exit 2; }
case "$prefix" in
  /*) ;;
  *) prefix="$(pwd)/$prefix" ;;
esac
prefix="${prefix%/}"

release="${CARGO_TARGET_DIR:-$root/target}/release"
if [ "$build" -eq 1 ]; then
  # A no-op when the release build is current.
  (cd "$root" && cargo build --release --workspace -q)
fi
[ -x "$release/evenflush" ] || { echo "install.sh: $release/evenflush missing: build with cargo build --release" >&2; exit 1; }
libs=("$release"/libevenflush_*.so)
[ -e "${libs[0]}" ] || { echo "install.sh: no preload library (libevenflush_*.so) in $release: is an MPI installed?" >&2; exit 1; }

dest="$destdir$prefix"
version="$("$release/evenflush" --version | awk '{ print $2 }')"

install -d "$dest/bin" "$dest/lib/evenflush" "$dest/share/man/man1" \
  "$dest/share/bash-completion/completions" "$dest/share/zsh/site-functions" \
  "$dest/share/fish/vendor_completions.d" "$dest/share/modulefiles/evenflush" \
  "$dest/share/modulefiles-tcl/evenflush"
install -m 0755 "$release/evenflush" "$dest/bin/evenflush"
for lib in "${libs[@]}"; do
  install -m 0644 "$lib" "$dest/lib/evenflush/"
done

gen="$(mktemp -d)"
trap 'rm -rf "$gen"' EXIT
"$dest/bin/evenflush" generate man "$gen/man"
"$dest/bin/evenflush" generate completions "$gen/completions"
install -m 0644 "$gen"/man/*.1 "$dest/share/man/man1/"
install -m 0644 "$gen/completions/evenflush.bash" "$dest/share/bash-completion/completions/evenflush"
install -m 0644 "$gen/completions/_evenflush" "$dest/share/zsh/site-functions/_evenflush"
install -m 0644 "$gen/completions/evenflush.fish" "$dest/share/fish/vendor_completions.d/evenflush.fish"

about="Record full MPI traces of long runs (Open MPI, MPICH) and recover their untraced timing"
cat >"$dest/share/modulefiles/evenflush/$version.lua" <<LUA
-- evenflush $version, installed by scripts/install.sh
help([[evenflush $version: $about.
Usage: evenflush run --out DIR -- mpirun -np N ./app; then evenflush info DIR. See man evenflush.]])
whatis("Name: evenflush")
whatis("Version: $version")
whatis("Description: $about")
local prefix = "$prefix"
prepend_path("PATH", pathJoin(prefix, "bin"))
prepend_path("MANPATH", pathJoin(prefix, "share/man"))
-- An empty entry keeps the system man pages: man-db reads "DIR::" as DIR, then its defaults.
append_path("MANPATH", "")
LUA
cat >"$dest/share/modulefiles-tcl/evenflush/$version" <<TCL
#%Module1.0
## evenflush $version, installed by scripts/install.sh
proc ModulesHelp { } {
    puts stderr "evenflush $version: $about."
}
module-whatis "evenflush $version: $about"
set prefix "$prefix"
prepend-path PATH \$prefix/bin
prepend-path MANPATH \$prefix/share/man
# An empty entry keeps the system man pages: man-db reads "DIR::" as DIR, then its defaults.
append-path MANPATH ""
TCL
echo "install.sh: evenflush $version installed in $prefix${destdir:+ (staged in $destdir)}"
