#!/usr/bin/env bash
# A private one-node Slurm cluster on this machine, for tests and for trying evenflush under srun.
#
#   scripts/slurm-cluster.sh start DIR   writes DIR/slurm.conf, starts munged, slurmctld, slurmd
#                                        (everything under DIR, loopback only) and waits until the
#                                        node is idle; prints `export SLURM_CONF=DIR/slurm.conf`
#   scripts/slurm-cluster.sh stop DIR    cancels DIR's jobs, stops its daemons by their pid files
#
# Nothing outside DIR is read or written: munged gets its own key, socket, log and seed (not
# /etc/munge, not the system service); Slurm's state, spool, logs and pid files live in DIR; the
# clients find the cluster only through SLURM_CONF. A failed start stops what it started. With
# SLURM_CLUSTER_OWNER=PID, a watcher stops the cluster once that process is gone, so that a test
# killed before it could stop the cluster leaves nothing running either.
set -euo pipefail

usage() {
  echo "usage: $0 start|stop DIR" >&2
  exit 2
}
[ $# -eq 2 ] || usage
action=$1
dir=$2
self=$(readlink -f "$0")
# Seconds to wait for the node to become idle, and for each daemon to exit on stop.
start_timeout=${SLURM_CLUSTER_TIMEOUT:-30}
stop_timeout=10

pidfiles() { echo "$dir/run/slurmd.pid $dir/run/slurmctld.pid $dir/munge/munged.pid"; }

stop() {
  [ -d "$dir" ] || return 0
  if [ -f "$dir/slurm.conf" ] && [ -f "$dir/run/slurmctld.pid" ]; then
    # Jobs first, so that no slurmstepd outlives its slurmd.
    SLURM_CONF="$dir/slurm.conf" timeout 5 scancel --quiet --user "$(id -un)" 2>/dev/null || true
    for _ in $(seq 50); do
      [ -z "$(SLURM_CONF="$dir/slurm.conf" timeout 5 squeue --noheader 2>/dev/null)" ] && break
      sleep 0.1
    done
  fi
  local pf pid
  for pf in $(pidfiles); do
    [ -f "$pf" ] || continue
    pid=$(cat "$pf" 2>/dev/null || true)
    rm -f "$pf"
    [[ "$pid" =~ ^[0-9]+$ ]] || continue
    kill -TERM "$pid" 2>/dev/null || continue
    for _ in $(seq $((stop_timeout * 10))); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  done
}

# A free TCP port on the loopback from a range unlikely to be used, starting at a point derived
# from our pid so that two clusters started at once do not race for the same port.
free_port() {
  local p=$((20000 + ($$ * 7 + $1 * 131) % 9000)) i
  for i in $(seq 200); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return
    fi
    p=$((p + 1))
  done
  echo "slurm-cluster: no free port near $p" >&2
  exit 1
}

start() {
  for tool in munged slurmctld slurmd sinfo; do
    command -v "$tool" >/dev/null || {
      echo "slurm-cluster: $tool not found (scripts/setup.sh installs slurm-wlm and munge)" >&2
      exit 1
    }
  done
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  # munged refuses directories that others may write to.
  chmod 0700 "$dir"
  mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log" "$dir/run"
  chmod 0700 "$dir/munge"
  trap 'echo "slurm-cluster: start failed, stopping what started" >&2; stop' ERR

  local user host ctld_port slurmd_port
  user=$(id -un)
  host=$(hostname)
  ctld_port=$(free_port 1)
  slurmd_port=$(free_port 2)
  [ "$slurmd_port" != "$ctld_port" ] || slurmd_port=$((ctld_port + 1))

  if [ ! -f "$dir/munge/munge.key" ]; then
    head -c 1024 /dev/urandom >"$dir/munge/munge.key"
    chmod 0400 "$dir/munge/munge.key"
  fi
  local socket=$dir/munge/munge.socket
  # The daemons' own output goes to files: a caller reading our stdout must not wait for them.
  munged --force --key-file="$dir/munge/munge.key" --socket="$socket" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
    --seed-file="$dir/munge/munged.seed" --num-threads=2 </dev/null >"$dir/log/munged.out" 2>&1 || {
    cat "$dir/log/munged.out" >&2
    false
  }

  cat >"$dir/slurm.conf" <<EOF
# Written by scripts/slurm-cluster.sh: a one-node cluster private to $dir.
ClusterName=evenflush
SlurmctldHost=$host(127.0.0.1)
SlurmUser=$user
SlurmdUser=$user
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
InactiveLimit=0
KillWait=5
MinJobAge=10
NodeName=$host NodeAddr=127.0.0.1 NodeHostname=$host CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
  export SLURM_CONF=$dir/slurm.conf
  # -i: start clean, ignoring any state a previous run left in $dir/state.
  slurmctld -i </dev/null >"$dir/log/slurmctld.out" 2>&1 || {
    cat "$dir/log/slurmctld.out" >&2
    false
  }
  slurmd -N "$host" </dev/null >"$dir/log/slurmd.out" 2>&1 || {
    cat "$dir/log/slurmd.out" >&2
    false
  }

  local state=""
  for _ in $(seq $((start_timeout * 5))); do
    state=$(timeout 5 sinfo --noheader --nodes="$host" --format=%t 2>/dev/null || true)
    [ "$state" = idle ] && break
    sleep 0.2
  done
  if [ "$state" != idle ]; then
    echo "slurm-cluster: node $host not idle after ${start_timeout}s (state '${state}')" >&2
    tail -n 5 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 2>/dev/null || true
    false
  fi
  trap - ERR
  local owner=${SLURM_CLUSTER_OWNER:-}
  if [[ "$owner" =~ ^[0-9]+$ ]]; then
    (
      while kill -0 "$owner" 2>/dev/null && [ -f "$dir/run/slurmctld.pid" ]; do sleep 1; done
      [ -f "$dir/run/slurmctld.pid" ] && "$self" stop "$dir"
    ) </dev/null >/dev/null 2>&1 &
  fi
  echo "export SLURM_CONF=$dir/slurm.conf"
}

case $action in
  start) start ;;
  stop) stop ;;
  *) usage ;;
esac
