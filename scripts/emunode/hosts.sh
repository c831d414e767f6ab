#!/usr/bin/env bash
# Makes the emulated nodes' names (scripts/emunode/nodes) resolve to their loopback addresses by
# adding them to /etc/hosts, once: lines already present are kept, a name bound to another address
# is an error rather than silently rebound. `--check` only reports (exit 1 if something is missing).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
hosts=${EMUNODE_HOSTS_FILE:-/etc/hosts}
check_only=${1:-}
status=0
while read -r name addr _offset _rest; do
  case "$name" in ''|'#'*) continue ;; esac
  case "$addr" in
    127.*) ;;
    *) echo "emunode: $name: $addr is not a loopback address; refusing" >&2; exit 1 ;;
  esac
  # Addresses this name already has in the hosts file (any column after the first).
  bound=$(awk -v n="$name" '$1 !~ /^#/ { for (i = 2; i <= NF; i++) { if ($i ~ /^#/) break; if ($i == n) print $1 } }' "$hosts")
  if [ -z "$bound" ]; then
    if [ "$check_only" = "--check" ]; then
      echo "emunode: $name is not in $hosts (run scripts/setup.sh as root)" >&2
      status=1
      continue
    fi
    printf '%s\t%s\t# evenflush emulated node (scripts/emunode)\n' "$addr" "$name" >> "$hosts"
    echo "emunode: added $addr $name to $hosts"
  elif [ "$bound" != "$addr" ]; then
    echo "emunode: $name is bound to $(echo $bound) in $hosts, expected $addr; fix $hosts by hand" >&2
    status=1
  fi
done < "$here/nodes"
exit $status
