#!/usr/bin/env bash
# vllm-fleet LAB: real multi-host test hosts on one machine (systemd-nspawn, own netns each).
# See lab/README.md. Everything it makes lives under $LAB_DIR (default lab/work, gitignored).
set -uo pipefail

LAB_ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
# shellcheck source=lib/common.sh
source "$LAB_ROOT/lib/common.sh"
# shellcheck source=lib/build.sh
source "$LAB_ROOT/lib/build.sh"
# shellcheck source=lib/hosts.sh
source "$LAB_ROOT/lib/hosts.sh"
# shellcheck source=lib/fault.sh
source "$LAB_ROOT/lib/fault.sh"

usage() {
  cat <<EOF
usage: lab/lab.sh COMMAND [ARGS]

  deps                 apt-get install what the lab needs and is missing
                       (systemd-container debootstrap dpkg-dev openssh-client iproute2 curl)
  build                base image, local apt repo, wheelhouse, ssh key, tiny model (reused if current)
  lock                 re-resolve lab/wheelhouse-requirements.txt from its '# top-level:' pins
  up [N]               start hosts lab1..labN (default 3; 10.200.0.11..) and wait for sshd;
                       lab1 and lab2 share the engine link (eth1, 10.201.0.11 and .12)
  down                 remove all runtime state: hosts, mounts, netns, bridge, cgroups, processes
  status               artefacts, bridge, each host (running, ssh, active faults)
  ssh HOST [CMD...]    ssh to a host as root (e.g. lab/lab.sh ssh lab1 systemctl --failed)
  clean                down, then remove built artefacts except the downloads (wheelhouse, apt repo)
  purge                down, then remove everything under \$LAB_DIR
  fault KNOB HOST ...  fault knobs (one command to apply, one to undo):
      slow-prefill HOST [QUOTA%]   CPU quota (default 30% of one CPU) on the host's engine processes
      slow-prefill-off HOST
      wedge HOST                   SIGSTOP the engine core (/health still answers, nothing generates)
      unwedge HOST
      host-stop HOST [--graceful]  power the host off (default: abrupt), disk kept
      host-start HOST
      kill-gate HOST [UNIT]        kill -9 the gate's main process (UNIT default $LAB_GATE_UNIT)
      kill-ray-worker HOST         kill -9 the engine's Ray worker processes on HOST (undo: restart the engine)
      clock-skew HOST SECONDS      programs run over ssh on HOST read the clock SECONDS off (libfaketime)
      clock-skew-off HOST
      mtu HOST IFACE MTU           set one end of a link to another MTU (e.g. mtu lab2 eth1 9000)
      mtu-off HOST

Environment: LAB_DIR (default lab/work), LAB_PYTHON (3.11, default python3), LAB_DEBIAN_MIRROR
(default: read from this machine's apt sources), LAB_UP_TIMEOUT, LAB_STOP_TIMEOUT.
EOF
}

cmd_clean() {
  need_root
  cmd_down
  rm -rf "$BASE_DIR" "$MODELS" "$BUILDENV" "$SSH_DIR" "$HOSTS_DIR" "$LOG_DIR" "$CACHE_DIR/plugin-src"
  rm -f "$STAMP_DIR/base" "$STAMP_DIR/model" "$STAMP_DIR/buildenv"   # the download stamps stay valid
  log "clean: removed base image, model, build venv, ssh key, logs (kept downloads: $WHEELS, $APTREPO)"
}

cmd_purge() {
  need_root
  cmd_down
  if findmnt -rn -o TARGET | grep -q "^$LAB_DIR/"; then die "mounts remain under $LAB_DIR; not purging"; fi
  rm -rf "$LAB_DIR"
  log "purge: removed $LAB_DIR"
}

main() {
  local cmd=${1:-help}
  shift || true
  case $cmd in
  deps | build | lock | up | down | clean | purge | fault)
    take_lock
    "cmd_$cmd" "$@"
    ;;
  status) cmd_status "$@" ;;
  ssh) cmd_ssh "$@" ;;
  help | -h | --help) usage ;;
  *)
    usage >&2
    exit 2
    ;;
  esac
}

main "$@"
