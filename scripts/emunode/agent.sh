#!/usr/bin/env bash
# ssh stand-in that "logs in" to an emulated node on this machine: it runs the command in fresh UTS
# and time namespaces, with the node's host name and its own CLOCK_MONOTONIC offset, on the shared
# loopback network. MPI launchers use it as their remote shell:
#
#   mpirun --mca plm_rsh_agent scripts/emunode/agent.sh --host nodeA:2,nodeB:2 ...   (Open MPI)
#   mpiexec.mpich -launcher ssh -launcher-exec scripts/emunode/agent.sh -hosts nodeA,nodeB ...
#
# Arguments are ssh's: options (skipped, with their values), the host ([user@]host), then the
# command, whose words are joined with spaces and run by a shell as sshd would. The node names and
# their loopback addresses are in scripts/emunode/nodes (scripts/setup.sh puts them into
# /etc/hosts); a node's monotonic offset in seconds comes from EMUNODE_OFFSET_<name> if set, else
# from that file. Needs root (unshare of UTS and time namespaces, Linux >= 5.6).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# ssh options that take a value (ssh(1)); every other option is a flag.
while [ $# -gt 0 ]; do
  case "$1" in
    -[BbcDEeFIiJLlmOopQRSWw]) shift 2 ;;
    -[BbcDEeFIiJLlmOopQRSWw]*) shift ;;   # value attached: -p22, -oBatchMode=yes
    --) shift; break ;;
    -*) shift ;;
    *) break ;;
  esac
done
if [ $# -lt 1 ]; then
  echo "emunode agent: no host given (arguments: ssh options, host, command)" >&2
  exit 255
fi
host=${1#*@}
shift

offset=""
while read -r name _addr node_offset _rest; do
  case "$name" in ''|'#'*) continue ;; esac
  if [ "$name" = "$host" ]; then offset=$node_offset; fi
done < "$here/nodes"
override_var="EMUNODE_OFFSET_${host//[^A-Za-z0-9_]/_}"
offset=${!override_var:-$offset}
if [ -z "$offset" ]; then
  echo "emunode agent: unknown node '$host' (known: $(grep -v '^#' "$here/nodes" | awk 'NF {print $1}' | tr '\n' ' '))" >&2
  exit 255
fi

# As sshd does: the command line is one string for a shell; no command means a login shell.
command_line="$*"
if [ -z "$command_line" ]; then
  echo "emunode agent: no command for $host (interactive logins are not emulated)" >&2
  exit 255
fi
exec unshare --uts --time --monotonic "$offset" --boottime "$offset" --fork --kill-child \
  /bin/sh -c 'hostname "$1" && shift && exec /bin/sh -c "$*"' emunode "$host" "$command_line"
