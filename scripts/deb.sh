#!/usr/bin/env bash
# Builds a Debian package of evenflush from the release build, with no tool beyond dpkg-dev:
# scripts/install.sh --prefix /usr staged into a package tree, man pages gzipped, and a control file
# whose Depends come from what the binary and the preload libraries link (dpkg-shlibdeps). The
# preload libraries need only the MPI a program already uses: their MPI runtimes are alternatives.
#
# Usage: scripts/deb.sh [--out DIR] [--no-build]     (default DIR: target/debian)
# Prints the path of the .deb. Install with `dpkg -i FILE`, remove with `dpkg -r evenflush`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

out="${CARGO_TARGET_DIR:-$root/target}/debian"
install_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    --out=*) out="${1#--out=}"; shift ;;
    --no-build) install_args+=(--no-build); shift ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "deb.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for tool in dpkg-deb dpkg-shlibdeps; do
  command -v "$tool" >/dev/null 2>&1 || { echo "deb.sh: $tool missing (Debian's dpkg-dev)" >&2; exit 1; }
done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# dpkg-shlibdeps wants the tree at debian/PACKAGE next to a debian/control.
stage="$work/debian/evenflush"
bash "$root/scripts/install.sh" --prefix /usr --destdir "$stage" "${install_args[@]}" >/dev/null
gzip -9n "$stage"/usr/share/man/man1/*.1

# Depends of one file, as dpkg-shlibdeps computes them: "pkg (>= v), pkg (>= v)".
printf 'Source: evenflush\n\nPackage: evenflush\nArchitecture: any\n' >"$work/debian/control"
depends_of() {
  (cd "$work" && dpkg-shlibdeps -O "$1" 2>/dev/null) | sed -n 's/^shlibs:Depends=//p'
}
depends="$(depends_of "$stage/usr/bin/evenflush")"
# Package names the binary already depends on (libc6, libgcc-s1, ...): not repeated per library.
known=",$(echo "$depends" | sed -E 's/ *\([^)]*\)//g; s/ //g'),"
mpis=()
for lib in "$stage"/usr/lib/evenflush/libevenflush_*.so; do
  own=()
  IFS=',' read -ra deps <<<"$(depends_of "$lib")"
  for dep in "${deps[@]}"; do
    dep="$(echo "$dep" | sed 's/^ *//; s/ *$//')"
    name="${dep%% *}"
    case "$known" in *",$name,"*) ;; *) own+=("$dep") ;; esac
  done
  [ ${#own[@]} -gt 0 ] && mpis+=("$(IFS=,; echo "${own[*]}")")
done
if [ ${#mpis[@]} -gt 0 ]; then
  alternatives="$(printf '%s | ' "${mpis[@]}")"
  depends="$depends, ${alternatives% | }"
fi

version="$("$stage/usr/bin/evenflush" --version | awk '{ print $2 }')"
arch="$(dpkg --print-architecture)"
size_kib="$(du -sk "$stage/usr" | awk '{ print $1 }')"
mkdir -p "$stage/DEBIAN"
cat >"$stage/DEBIAN/control" <<CONTROL
Package: evenflush
Version: $version
Architecture: $arch
Maintainer: ${DEB_MAINTAINER:-evenflush developers <evenflush@localhost>}
Installed-Size: $size_kib
Depends: $depends
Section: devel
Priority: optional
Description: record full MPI traces of long runs and recover their timing
 evenflush preloads a PMPI recorder into the ranks of an Open MPI or MPICH
 job, offloads the trace to disk in equalised suspensions, and reconstructs
 the untraced timing. Man pages: evenflush(1); Lmod module in
 /usr/share/modulefiles.
CONTROL

mkdir -p "$out"
deb="$out/evenflush_${version}_${arch}.deb"
# gzip -1: the tests build the package too; xz would make it ~40 % smaller but takes over a
# minute on 2 cores.
dpkg-deb --root-owner-group -Zgzip -z1 --build "$stage" "$deb" >/dev/null
echo "$deb"
