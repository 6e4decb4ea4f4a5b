# shellcheck shell=bash
# `fault KNOB HOST ...`: fault knobs, each with one command to apply and one to undo.
# All but clock-skew are applied from the root namespace (outside the host), so they work whatever
# state the host's own services are in, and Ansible running inside the host cannot see or undo them.
# clock-skew writes into the host's disk (an sshd drop-in): the hosts share one kernel clock.

# Engine processes are found by the titles vLLM (setproctitle) and Ray give them, among the
# processes of that host's cgroup tree only.
LAB_ENGINE_CORE_RE=${LAB_ENGINE_CORE_RE:-'^VLLM::EngineCore'}
LAB_ENGINE_PROC_RE=${LAB_ENGINE_PROC_RE:-'^(VLLM::EngineCore|VLLM::Worker|ray::RayWorkerProc)'}
LAB_RAY_WORKER_RE=${LAB_RAY_WORKER_RE:-'^ray::RayWorkerProc'}
LAB_GATE_UNIT=${LAB_GATE_UNIT:-vllm-fleet-gate.service}
CPU_CG=/sys/fs/cgroup/cpu

# PIDs (root-namespace view) of host $1's processes whose command line matches regex $2.
host_procs_matching() {
  local name=$1 re=$2 p cmd
  for p in $(host_pids "$name"); do
    cmd=$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null) || continue
    [[ $cmd =~ $re ]] && echo "$p"
  done
}
proc_title() { tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | cut -c1-40 | sed 's/ *$//'; }
describe_pids() {
  local p out=()
  for p in "$@"; do out+=("$p=$(proc_title "$p")"); done
  echo "${out[*]}"
}

# need_running_host HOST [USAGE]: HOST is a lab host and running; no HOST at all: die USAGE.
need_running_host() {
  [[ -n $1 ]] || die "${2:-no HOST given}"
  check_host_name "$1"
  host_running "$1" || die "$1 is not running (lab/lab.sh status; lab/lab.sh up)"
}

# need_procs_matching ARRAY HOST WHY REGEX...: ARRAY gets the PIDs of HOST's processes matching the
# first REGEX that any matches; none matches: die WHY. A nameref, not $(...): die must end the run.
need_procs_matching() {
  local -n __pids=$1
  local name=$2 why=$3 re
  for re in "${@:4}"; do
    mapfile -t __pids < <(host_procs_matching "$name" "$re")
    ((${#__pids[@]})) && return 0
  done
  die "$why"
}
# The same for the engine's processes, REGEX... as above.
need_engine_procs() {
  need_procs_matching "$1" "$2" \
    "no vLLM engine process in $2 (titles matching $LAB_ENGINE_PROC_RE): is vLLM serving there?" "${@:3}"
}

# ---- slow-prefill: a CFS CPU quota on the host's engine processes ---------------------------------
# The hosts' own cgroup-v1 controllers are read-only, so CPUQuota= in a unit is not enforced, and
# cpulimit (SIGSTOP duty cycles) does not move TTFT (lab-tp2 §6a). This knob makes a cgroup in the
# root side's v1 cpu hierarchy, /sys/fs/cgroup/cpu/lab/HOST/slow-prefill, with cfs_quota = QUOTA % of
# one CPU, and moves the engine processes (EngineCore, Worker_TP*, RayWorkerProc) into it. Threads
# and any children they fork follow; the processes' systemd (name=systemd) cgroup is untouched, so
# the units do not notice. It lasts exactly as long as those processes: a restart of the engine
# makes new processes, which the host's systemd starts in the root cpu cgroup, unthrottled. So it
# persists until the engine restarts, and a restart is the recovery. Measured in lab-tp2 §6a:
# EngineCore 30 % → TTFT median 100 ms (from 42), EngineCore + Worker_TP0 sharing 30 % → 177 ms.
fault_slow_prefill() {
  local name=${1:-} quota=${2:-30}
  need_running_host "$name" "usage: lab.sh fault slow-prefill HOST [QUOTA%]  (QUOTA: % of one CPU, 1-200, default 30)"
  [[ $quota =~ ^[0-9]+$ ]] && ((quota >= 1 && quota <= 200)) || die "QUOTA must be 1..200 (% of one CPU), got '$quota'"
  local pids
  need_engine_procs pids "$name" "$LAB_ENGINE_PROC_RE"
  local cg=$CPU_CG/$LAB_CGROUP/$name/slow-prefill p orig
  mkdir -p "$cg"
  echo 100000 >"$cg/cpu.cfs_period_us"
  echo $((quota * 1000)) >"$cg/cpu.cfs_quota_us"
  for p in "${pids[@]}"; do
    orig=$(awk -F: '$2 == "cpu" || $2 ~ /(^|,)cpu(,|$)/ { print $3; exit }' "/proc/$p/cgroup" 2>/dev/null)
    [[ $orig == "/$LAB_CGROUP/$name/slow-prefill" ]] && continue
    echo "$p ${orig:-/}" >>"$STATE_DIR/$name.fault.slow-prefill"
    echo "$p" >"$cg/cgroup.procs" || warn "could not move pid $p (exited?)"
  done
  log "fault slow-prefill $name: $(describe_pids "${pids[@]}") now share a ${quota}% CPU quota ($cg)"
  log "  lasts until those processes exit (an engine restart clears it); undo: lab/lab.sh fault slow-prefill-off $name"
}

fault_slow_prefill_off() {
  local name=${1:-} quiet=${2:-}
  [[ -n $name ]] || die "usage: lab.sh fault slow-prefill-off HOST"
  check_host_name "$name"
  local cg=$CPU_CG/$LAB_CGROUP/$name/slow-prefill p orig stat=""
  if [[ ! -d $cg ]]; then
    [[ -n $quiet ]] || log "fault slow-prefill-off $name: no quota in place; nothing to do"
    rm -f "$STATE_DIR/$name.fault.slow-prefill"
    return 0
  fi
  stat=$(awk '{ printf "%s=%s ", $1, $2 }' "$cg/cpu.stat" 2>/dev/null)
  # Back to where each came from (normally the root cpu cgroup).
  for p in $(cat "$cg/cgroup.procs" 2>/dev/null); do
    orig=$(awk -v p="$p" '$1 == p { print $2 }' "$STATE_DIR/$name.fault.slow-prefill" 2>/dev/null)
    [[ -d $CPU_CG${orig:-/} ]] || orig=/
    echo "$p" >"$CPU_CG${orig%/}/cgroup.procs" 2>/dev/null || echo "$p" >"$CPU_CG/cgroup.procs" 2>/dev/null || true
  done
  rmdir "$cg" 2>/dev/null || warn "could not remove $cg"
  rmdir "$CPU_CG/$LAB_CGROUP/$name" "$CPU_CG/$LAB_CGROUP" 2>/dev/null || true
  rm -f "$STATE_DIR/$name.fault.slow-prefill"
  [[ -n $quiet ]] || log "fault slow-prefill-off $name: quota removed (${stat% })"
}

# ---- wedge: SIGSTOP the engine core --------------------------------------------------------------
# The API server keeps answering /health (200, slower) while nothing generates; clients see the stall
# only through their own timeouts. A stall longer than VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS (default
# 300 s) kills the engine (lab-tp2 §6b). On a host without an EngineCore (the headless TP rank),
# the engine workers are stopped instead, which looks the same from the API.
fault_wedge() {
  local name=${1:-}
  need_running_host "$name" "usage: lab.sh fault wedge HOST"
  local pids
  need_engine_procs pids "$name" "$LAB_ENGINE_CORE_RE" "$LAB_ENGINE_PROC_RE"
  kill -STOP "${pids[@]}"
  printf '%s\n' "${pids[@]}" >>"$STATE_DIR/$name.fault.wedge"
  log "fault wedge $name: SIGSTOP $(describe_pids "${pids[@]}"); undo: lab/lab.sh fault unwedge $name"
}

fault_unwedge() {
  local name=${1:-} quiet=${2:-}
  [[ -n $name ]] || die "usage: lab.sh fault unwedge HOST"
  check_host_name "$name"
  local pids=() p
  [[ -f $STATE_DIR/$name.fault.wedge ]] && mapfile -t pids <"$STATE_DIR/$name.fault.wedge"
  # Also any engine process left stopped (state T) by other means.
  for p in $(host_procs_matching "$name" "$LAB_ENGINE_PROC_RE"); do
    [[ "$(awk '{ print $3 }' "/proc/$p/stat" 2>/dev/null)" == T ]] && pids+=("$p")
  done
  rm -f "$STATE_DIR/$name.fault.wedge"
  ((${#pids[@]})) || {
    [[ -n $quiet ]] || log "fault unwedge $name: nothing stopped; nothing to do"
    return 0
  }
  mapfile -t pids < <(printf '%s\n' "${pids[@]}" | sort -un)
  kill -CONT "${pids[@]}" 2>/dev/null || true
  [[ -n $quiet ]] || log "fault unwedge $name: SIGCONT ${pids[*]}"
}

# ---- host-stop / host-start ----------------------------------------------------------------------
# Default: power loss. The host's link goes down (peers get no answer, not a refusal) and its PID 1
# is SIGKILLed, ending every process in it at once. --graceful halts it cleanly first (units stop).
# The host's disk (overlay) and netns are kept, so host-start boots the same host again.
fault_host_stop() {
  local name=${1:-} mode=hard
  [[ ${2:-} == --graceful ]] && mode=clean
  [[ -n $name ]] || die "usage: lab.sh fault host-stop HOST [--graceful]"
  check_host_name "$name"
  if ! host_running "$name"; then
    log "fault host-stop $name: not running; nothing to do"
    return 0
  fi
  local t0
  t0=$(now_ms)
  [[ $mode == hard ]] && ip link set "veth-$name" down
  stop_nspawn "$name" "$mode"
  ip link set "veth-$name" down 2>/dev/null
  # The host's namespace outlives it (the engine link's end lives there): a powered-off host
  # answers nothing, so its end of the link goes dark too, else its kernel would still
  # refuse connections to its link address, as no switched-off Spark does.
  if [[ " ${LAB_LINK_HOSTS[*]} " == *" $name "* ]]; then
    ip -n "$name" link set "$LAB_LINK_IF" down 2>/dev/null || true
  fi
  fault_clear_host "$name"
  touch "$STATE_DIR/$name.host-stop"
  log "fault host-stop $name: stopped ($mode, $(secs_since "$t0")s); disk kept; undo: lab/lab.sh fault host-start $name"
}

fault_host_start() {
  local name=${1:-}
  [[ -n $name ]] || die "usage: lab.sh fault host-start HOST"
  check_host_name "$name"
  need_cmds systemd-nspawn
  if host_running "$name"; then
    log "fault host-start $name: already running; nothing to do"
    return 0
  fi
  built_ok || die "lab artefacts missing: run \`lab/lab.sh build\`"
  local t0
  t0=$(now_ms)
  mkdir -p "$HOSTS_DIR" "$LOG_DIR" "$STATE_DIR"
  ensure_runtime_mounts
  ensure_bridge
  start_host "$name"
  ip link set "veth-$name" up
  ensure_link
  wait_ssh "$name"
  netns_sysfs "$name"
  log "fault host-start $name: back, sshd answers ($(secs_since "$t0")s)"
}

# ---- kill-gate: kill -9 the gate service's main process ------------------------------------------
fault_kill_gate() {
  local name=${1:-} unit=${2:-$LAB_GATE_UNIT}
  need_running_host "$name" "usage: lab.sh fault kill-gate HOST [UNIT]  (UNIT default: $LAB_GATE_UNIT)"
  local main new deadline
  main=$(host_exec "$name" systemctl show -P MainPID "$unit" 2>/dev/null) || main=0
  [[ $main =~ ^[1-9][0-9]*$ ]] || die "$unit has no main process on $name (not installed or not running: systemctl status $unit)"
  host_exec "$name" kill -KILL "$main"
  log "fault kill-gate $name: kill -9 $unit main pid $main (pid in $name); systemd restarts it if the unit says Restart="
  deadline=$((SECONDS + ${LAB_GATE_RESTART_WAIT:-15}))
  while ((SECONDS < deadline)); do
    new=$(host_exec "$name" systemctl show -P MainPID "$unit" 2>/dev/null) || new=0
    if [[ $new =~ ^[1-9][0-9]*$ && $new != "$main" ]]; then
      log "  $unit restarted: main pid $new"
      return 0
    fi
    sleep 0.5
  done
  log "  $unit not restarted within ${LAB_GATE_RESTART_WAIT:-15}s (state: $(host_exec "$name" systemctl is-active "$unit" 2>/dev/null))"
}

# ---- clock-skew: the host's clock SECONDS off for every program run over ssh -----------------------
# The hosts share this machine's kernel clock (CLOCK_REALTIME has no namespace), so the knob makes
# the host's sshd start every session with libfaketime preloaded (this machine's, copied into the
# host's disk) and the offset in FAKETIME: what Ansible runs there reads the skewed clock. It cannot
# go in /etc/ld.so.preload: sshd itself breaks under it ("master hello exchange failed"). Sessions
# open at the time are ended (the controller's ssh reconnects), at apply and at undo alike.
# Programs systemd starts keep the true clock.
LAB_FAKETIME_LIB=${LAB_FAKETIME_LIB:-/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1}
LAB_FAKETIME_IN_HOST=/usr/local/lib/lab-faketime/libfaketime.so.1
LAB_CLOCK_SKEW_CONF=/etc/ssh/sshd_config.d/lab-clock-skew.conf

# Reload the host's sshd and end its open sessions, so that every new one reads its config.
restart_ssh_sessions() {
  host_exec "$1" systemctl reload ssh.service
  host_exec "$1" pkill -TERM -f '^sshd: [^ ]+@' || true
}

fault_clock_skew() {
  local name=${1:-} offset=${2:-}
  [[ -n $name && -n $offset ]] || die "usage: lab.sh fault clock-skew HOST SECONDS  (a signed whole number, e.g. +5 or -30)"
  need_running_host "$name"
  [[ $offset =~ ^[+-]?[0-9]{1,6}$ ]] || die "SECONDS must be a whole number of at most 6 digits, with an optional sign; got '$offset'"
  [[ -r $LAB_FAKETIME_LIB ]] || die "no $LAB_FAKETIME_LIB on this machine: run lab/lab.sh deps (apt-get install faketime)"
  local root=$HOSTS_DIR/$name/merged sign=1 value
  [[ $offset == -* ]] && sign=-1
  value=$(printf '%+d' "$((sign * 10#${offset#[+-]}))")
  install -D -m 0644 "$LAB_FAKETIME_LIB" "$root$LAB_FAKETIME_IN_HOST"
  printf '# lab/lab.sh fault clock-skew %s %s (undo: lab/lab.sh fault clock-skew-off %s)\nSetEnv LD_PRELOAD=%s FAKETIME=%s\n' \
    "$name" "$value" "$name" "$LAB_FAKETIME_IN_HOST" "$value" >"$root$LAB_CLOCK_SKEW_CONF"
  echo "$value" >"$STATE_DIR/$name.fault.clock-skew"
  restart_ssh_sessions "$name"
  log "fault clock-skew $name: programs run over ssh there read the clock $value s off (libfaketime); undo: lab/lab.sh fault clock-skew-off $name"
}

fault_clock_skew_off() {
  local name=${1:-} quiet=${2:-}
  [[ -n $name ]] || die "usage: lab.sh fault clock-skew-off HOST"
  check_host_name "$name"
  if [[ ! -e $STATE_DIR/$name.fault.clock-skew ]]; then
    [[ -n $quiet ]] || log "fault clock-skew-off $name: no skew in place; nothing to do"
    return 0
  fi
  local root=$HOSTS_DIR/$name/merged
  rm -f "$root$LAB_CLOCK_SKEW_CONF" "$root$LAB_FAKETIME_IN_HOST"
  rmdir "$root${LAB_FAKETIME_IN_HOST%/*}" 2>/dev/null || true
  host_running "$name" && restart_ssh_sessions "$name"
  rm -f "$STATE_DIR/$name.fault.clock-skew"
  [[ -n $quiet ]] || log "fault clock-skew-off $name: the host's ssh sessions read the true clock again"
}

# ---- mtu: one end of a link with another MTU ------------------------------------------------------
# The two ends of a direct cable configured apart (netplan `mtu: 9000` on one Spark only): both
# read up, the handshake's small packets pass, and larger frames are dropped at the smaller end.
# Applied from the root side with `ip -n`; the undo puts the MTU the interface had back.
fault_mtu() {
  local name=${1:-} iface=${2:-} mtu=${3:-} was
  [[ -n $name && -n $iface && -n $mtu ]] || die "usage: lab.sh fault mtu HOST IFACE MTU  (e.g. mtu lab2 $LAB_LINK_IF 9000)"
  need_running_host "$name"
  [[ $mtu =~ ^[0-9]{2,5}$ ]] && ((10#$mtu >= 68 && 10#$mtu <= 65535)) || die "MTU must be 68..65535, got '$mtu'"
  was=$(ip -n "$name" -o link show dev "$iface" 2>/dev/null | sed -n 's/.* mtu \([0-9]*\) .*/\1/p')
  [[ -n $was ]] || die "$name has no interface '$iface' (it has: $(ip -n "$name" -br link | awk '{ printf "%s ", $1 }'))"
  [[ -s $STATE_DIR/$name.fault.mtu ]] || echo "$iface $was" >"$STATE_DIR/$name.fault.mtu"
  ip -n "$name" link set dev "$iface" mtu "$mtu"
  log "fault mtu $name: $iface mtu $was -> $mtu; undo: lab/lab.sh fault mtu-off $name"
}

fault_mtu_off() {
  local name=${1:-} quiet=${2:-} iface was
  [[ -n $name ]] || die "usage: lab.sh fault mtu-off HOST"
  check_host_name "$name"
  if [[ ! -s $STATE_DIR/$name.fault.mtu ]]; then
    [[ -n $quiet ]] || log "fault mtu-off $name: no MTU changed; nothing to do"
    return 0
  fi
  read -r iface was <"$STATE_DIR/$name.fault.mtu"
  ip -n "$name" link set dev "$iface" mtu "$was" 2>/dev/null || warn "could not set $name's $iface back to mtu $was (netns gone?)"
  rm -f "$STATE_DIR/$name.fault.mtu"
  [[ -n $quiet ]] || log "fault mtu-off $name: $iface mtu back to $was"
}

# ---- bookkeeping used by status and down ---------------------------------------------------------
fault_list() {
  local name=$1 out=()
  [[ -d $CPU_CG/$LAB_CGROUP/$name/slow-prefill ]] && out+=("slow-prefill($(($(cat "$CPU_CG/$LAB_CGROUP/$name/slow-prefill/cpu.cfs_quota_us") / 1000))%)")
  [[ -s $STATE_DIR/$name.fault.wedge ]] && out+=(wedge)
  [[ -e $STATE_DIR/$name.host-stop ]] && out+=(host-stop)
  [[ -s $STATE_DIR/$name.fault.clock-skew ]] && out+=("clock-skew($(cat "$STATE_DIR/$name.fault.clock-skew") s)")
  [[ -s $STATE_DIR/$name.fault.mtu ]] && out+=("mtu($(awk '{ print $1 }' "$STATE_DIR/$name.fault.mtu"))")
  echo "${out[*]}"
}

fault_clear_host() {
  fault_unwedge "$1" quiet
  fault_slow_prefill_off "$1" quiet
  fault_clock_skew_off "$1" quiet
  fault_mtu_off "$1" quiet
}

# ---- kill-ray-worker: kill -9 the engine's Ray worker processes on a host -------------------------
# A crash of the TP rank that runs on a worker host (RayWorkerProc, vLLM's Ray V2 actor): the head
# sees it at once (vllm-ray-cpu.md: "RayWorkerProc rank=[1] died unexpectedly"). Nothing restarts it;
# the undo is a restart of the whole engine (rolling-restart.yml or site.yml).
fault_kill_ray_worker() {
  local name=${1:-}
  need_running_host "$name" "usage: lab.sh fault kill-ray-worker HOST"
  local pids
  need_procs_matching pids "$name" "no Ray worker process on $name (is the engine running there over Ray? lab/lab.sh ssh $name systemctl status vllm ray)" "$LAB_RAY_WORKER_RE"
  local what
  what=$(describe_pids "${pids[@]}")
  kill -KILL "${pids[@]}"
  log "fault kill-ray-worker $name: kill -9 $what; undo: restart the engine (playbooks/rolling-restart.yml)"
}

cmd_fault() {
  local knob=${1:-}
  shift || true
  need_root
  case $knob in
  slow-prefill) fault_slow_prefill "$@" ;;
  slow-prefill-off) fault_slow_prefill_off "$@" ;;
  wedge) fault_wedge "$@" ;;
  unwedge) fault_unwedge "$@" ;;
  host-stop) fault_host_stop "$@" ;;
  host-start) fault_host_start "$@" ;;
  kill-gate) fault_kill_gate "$@" ;;
  kill-ray-worker) fault_kill_ray_worker "$@" ;;
  clock-skew) fault_clock_skew "$@" ;;
  clock-skew-off) fault_clock_skew_off "$@" ;;
  mtu) fault_mtu "$@" ;;
  mtu-off) fault_mtu_off "$@" ;;
  *) die "usage: lab.sh fault {slow-prefill HOST [QUOTA%] | slow-prefill-off HOST | wedge HOST | unwedge HOST | host-stop HOST [--graceful] | host-start HOST | kill-gate HOST [UNIT] | kill-ray-worker HOST | clock-skew HOST SECONDS | clock-skew-off HOST | mtu HOST IFACE MTU | mtu-off HOST}" ;;
  esac
}
