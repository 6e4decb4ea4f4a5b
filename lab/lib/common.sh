# shellcheck shell=bash
# Shared by lab.sh and its libraries: paths, logging, the step runner, stamps, the lock.

# ---- paths ---------------------------------------------------------------------------------------
LAB_ROOT=${LAB_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}   # the repo's lab/ dir
LAB_DIR=${LAB_DIR:-$LAB_ROOT/work}          # everything the lab makes lives here (gitignored)
BASE_DIR=$LAB_DIR/base                      # base/rootfs: the debootstrapped image every host overlays
BASE=$BASE_DIR/rootfs
APTREPO=$LAB_DIR/aptrepo                    # flat apt repo, bind-mounted ro at /srv/aptrepo
WHEELS=$LAB_DIR/wheelhouse                  # bind-mounted ro at /wheels
MODELS=$LAB_DIR/model                       # bind-mounted ro at /srv/models (model: tiny/)
SSH_DIR=$LAB_DIR/ssh
SSH_KEY=$SSH_DIR/id_ed25519
HOSTS_DIR=$LAB_DIR/hosts                    # per host: upper/ work/ merged/ (the overlay)
TRASH_DIR=$LAB_DIR/trash                    # removed hosts' disks, deleted in the background
LOG_DIR=$LAB_DIR/logs
STATE_DIR=$LAB_DIR/state                    # runtime: wrapper pids, active faults (cleared by down)
STAMP_DIR=$LAB_DIR/stamps
BUILDENV=$LAB_DIR/buildenv                  # controller-side venv that builds the tiny model
CACHE_DIR=$LAB_DIR/cache                    # private apt lists for the apt repo download

# ---- network and names (one lab per machine: the names below are machine-global) ----------------
LAB_BRIDGE=br-lab
LAB_NET=10.200.0
LAB_GW=$LAB_NET.1                           # the controller's address on the bridge
# The engine link: a veth pair (eth1 in each) between these two hosts only, as a Spark pair's direct
# cable; its subnet is routed nowhere else (the controller and lab3 have no address on it).
LAB_LINK_NET=10.201.0
LAB_LINK_HOSTS=(lab1 lab2)
LAB_LINK_IF=eth1
LAB_MAX_HOSTS=9
LAB_CGROUP=lab                              # /sys/fs/cgroup/<hierarchy>/lab/<host>
LAB_LOCK=/run/lock/vllm-fleet-lab.lock

host_ip() { echo "$LAB_NET.$((10 + ${1#lab}))"; }
link_ip() { echo "$LAB_LINK_NET.$((10 + ${1#lab}))"; }

# ---- logging -------------------------------------------------------------------------------------
LAB_T0=${LAB_T0:-$(date +%s)}
export LAB_T0
_ts() { echo "+$(($(date +%s) - LAB_T0))s"; }
log() { printf '[lab %s] %s\n' "$(_ts)" "$*"; }
warn() { printf '[lab %s] WARNING: %s\n' "$(_ts)" "$*" >&2; }
die() {
  printf '[lab %s] ERROR: %s\n' "$(_ts)" "$*" >&2
  exit 1
}

# Show where a failed step's output went, and its tail.
show_log_tail() {
  local f=$1 n=${2:-25}
  [[ -s $f ]] || return 0
  printf '[lab %s] --- last %s lines of %s ---\n' "$(_ts)" "$n" "$f" >&2
  tail -n "$n" "$f" >&2
  printf '[lab %s] --- end of %s ---\n' "$(_ts)" "$f" >&2
}

# run_step WHAT ESTIMATE LOGFILE CMD...
# Runs CMD with its output appended to LOGFILE and prints a line every 15 s while it runs,
# so a long step is never silent. On failure: the log's path and tail, then exit.
run_step() {
  local what=$1 est=$2 logf=$3
  shift 3
  mkdir -p "$(dirname "$logf")"
  log "$what${est:+ ($est)}..."
  printf '\n===== %s: %s\n===== %s\n' "$(date -Is)" "$what" "$*" >>"$logf"
  local t0 rc=0 last n
  t0=$(date +%s)
  last=$t0
  "$@" >>"$logf" 2>&1 </dev/null &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if (($(date +%s) - last >= 15)); then
      last=$(date +%s)
      n=$((last - t0))
      log "  ... $what: still running, ${n}s (log: $logf)"
    fi
  done
  wait "$pid" || rc=$?
  if ((rc != 0)); then
    show_log_tail "$logf"
    die "$what failed (rc $rc) after $(($(date +%s) - t0))s; full log: $logf"
  fi
  log "  $what: done in $(($(date +%s) - t0))s"
}

# ---- stamps: a build step is redone only when the key of its inputs changes -----------------------
stamp_ok() { [[ -f $STAMP_DIR/$1 && "$(cat "$STAMP_DIR/$1")" == "$2" ]]; }
stamp_set() {
  mkdir -p "$STAMP_DIR"
  printf '%s\n' "$2" >"$STAMP_DIR/$1"
}
stamp_get() { cat "$STAMP_DIR/$1" 2>/dev/null || true; }
sha_of() { sha256sum | cut -c1-16; }

# ---- the lab lock: one mutating lab.sh at a time (others wait, with a message) -------------------
take_lock() {
  mkdir -p "$(dirname "$LAB_LOCK")"
  exec 9>>"$LAB_LOCK"
  if ! flock -n 9; then
    log "another lab.sh holds $LAB_LOCK; waiting up to ${LAB_LOCK_WAIT:-900}s..."
    flock -w "${LAB_LOCK_WAIT:-900}" 9 || die "timed out waiting for $LAB_LOCK (another lab.sh is still running)"
  fi
}

need_root() { ((EUID == 0)) || die "the lab needs root (namespaces, mounts, cgroups): run it as root"; }

# Command -> Debian package, for `deps` and for the messages that point at it.
declare -A LAB_DEP_PKG=(
  [systemd-nspawn]=systemd-container
  [debootstrap]=debootstrap
  [dpkg-scanpackages]=dpkg-dev
  [ssh]=openssh-client
  [ssh-keygen]=openssh-client
  [ip]=iproute2
  [curl]=curl
  [nsenter]=util-linux
  [flock]=util-linux
  [faketime]=faketime   # its libfaketime is the clock-skew knob's (fault.sh)
)

need_cmds() {
  local c
  for c in "$@"; do
    command -v "$c" >/dev/null 2>&1 ||
      die "$c not found: run \`lab/lab.sh deps\` (apt-get install ${LAB_DEP_PKG[$c]:-the package providing $c})"
  done
}
