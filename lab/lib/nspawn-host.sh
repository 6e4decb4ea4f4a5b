#!/usr/bin/env bash
# Runs one lab host: systemd-nspawn booting the host's overlay, with real systemd as its PID 1.
# Started detached by lab.sh (`up`, `fault host-start`); its output is the host's console log.
#   nspawn-host.sh NAME ROOTDIR STOPFLAG [extra systemd-nspawn args...]
# The machine has no systemd as PID 1, hence (docs: lab-hosts §3a):
#   --register=no --keep-unit   nspawn would otherwise ask a system bus for a scope unit;
#   own cgroup per host         with --keep-unit every container lands in one shared cgroup;
#   loop while rc == 133        an in-guest `reboot` makes nspawn exit 133 ("being rebooted").
set -u
name=$1 root=$2 stopflag=$3
shift 3

for h in systemd unified; do
  mkdir -p "/sys/fs/cgroup/$h/lab/$name"
  echo $$ >"/sys/fs/cgroup/$h/lab/$name/cgroup.procs"
done

child=
# SIGTERM (lab.sh down / host-stop --graceful): pass it on; nspawn turns it into a clean halt.
trap 'touch "$stopflag"; [[ -n $child ]] && kill -TERM "$child" 2>/dev/null' TERM INT

while :; do
  echo "[nspawn-host $(date -Is)] starting $name"
  systemd-nspawn --boot --directory="$root" --machine="$name" --hostname="$name" \
    --register=no --keep-unit --network-namespace-path="/run/netns/$name" \
    --console=read-only --link-journal=no --resolv-conf=off --timezone=off "$@" &
  child=$!
  rc=0
  # `wait` returns early (rc > 128) when a trapped signal arrives; keep waiting for nspawn itself.
  while kill -0 "$child" 2>/dev/null; do
    wait "$child"
    rc=$?
  done
  echo "[nspawn-host $(date -Is)] $name: systemd-nspawn exited rc=$rc"
  if ((rc == 133)) && [[ ! -e $stopflag ]]; then
    echo "[nspawn-host $(date -Is)] $name: in-guest reboot, starting again"
    continue
  fi
  exit "$rc"
done
