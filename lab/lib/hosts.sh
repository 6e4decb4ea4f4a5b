# shellcheck shell=bash
# `up`, `down`, `status`, `ssh`: the hosts themselves.
# A host = network namespace labN (veth eth0 on bridge br-lab, 10.200.0.1N/24, no default route;
#          lab1 and lab2 also eth1, the two ends of the engine link, 10.201.0.1N/24)
#        + overlay (upper per host, lower = the shared base) + systemd-nspawn booting it (nspawn-host.sh)
#        + its own cgroups /sys/fs/cgroup/{systemd,unified}/lab/labN.

SSH_OPTS=(-i "$SSH_KEY" -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null
  -o LogLevel=ERROR -o ConnectTimeout=3)
LAB_UP_TIMEOUT=${LAB_UP_TIMEOUT:-120}       # s to wait for sshd on all hosts
LAB_STOP_TIMEOUT=${LAB_STOP_TIMEOUT:-40}    # s for a clean in-guest halt before the host is killed

now_ms() { date +%s%3N; }
secs_since() { awk -v a="$1" -v b="$(now_ms)" 'BEGIN { printf "%.1f", (b - a) / 1000 }'; }

check_host_name() {
  [[ $1 =~ ^lab([1-9])$ ]] || die "unknown host '$1': lab hosts are named lab1..lab$LAB_MAX_HOSTS"
}

wrapper_pid() { cat "$STATE_DIR/$1.pid" 2>/dev/null || true; }
host_running() {
  local pid
  pid=$(wrapper_pid "$1")
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null && grep -qa nspawn-host "/proc/$pid/cmdline" 2>/dev/null
}
# Host PIDs (as the root namespace sees them) of every process inside host $1.
host_pids() { find "/sys/fs/cgroup/systemd/$LAB_CGROUP/$1/payload" -name cgroup.procs -exec cat {} + 2>/dev/null || true; }
# The host's PID 1 (its systemd), seen from the root namespace.
host_init_pid() {
  local p
  for p in $(host_pids "$1"); do
    if awk '/^NSpid:/ { exit !($NF == 1 && NF > 2) }' "/proc/$p/status" 2>/dev/null; then
      echo "$p"
      return 0
    fi
  done
  return 1
}
# Run a command inside host $1's namespaces from the root side (no ssh needed).
host_exec() {
  local name=$1 init
  shift
  init=$(host_init_pid "$name") || die "$name is not running"
  nsenter -t "$init" -m -u -i -n -p -- env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"
}
ssh_ok() { ssh "${SSH_OPTS[@]}" -o ConnectTimeout=2 "root@$(host_ip "$1")" true >/dev/null 2>&1; }

# ---- pieces of a host ----------------------------------------------------------------------------
ensure_runtime_mounts() {
  mkdir -p "$STATE_DIR"
  # nspawn keeps per-machine propagation dirs here; on disk (/run is not a tmpfs on this machine)
  # its teardown refuses to remove them ("…we can't allow that"). A tmpfs fixes it.
  if ! mountpoint -q /run/systemd/nspawn 2>/dev/null; then
    [[ -d /run/systemd/nspawn ]] || {
      mkdir -p /run/systemd/nspawn
      touch "$STATE_DIR/made-nspawn-dir"
    }
    mount -t tmpfs -o mode=0755,size=16m lab-nspawn /run/systemd/nspawn
    touch "$STATE_DIR/made-nspawn-tmpfs"
  fi
  # `ip netns add` makes /run/netns and turns it into a mount point of its own; note if it was us.
  [[ -d /run/netns || -e $STATE_DIR/made-run-netns-dir ]] || touch "$STATE_DIR/made-run-netns-dir"
  if ! mountpoint -q /run/netns 2>/dev/null && [[ ! -e $STATE_DIR/made-run-netns ]]; then
    touch "$STATE_DIR/made-run-netns"
  fi
}

ensure_bridge() {
  if ! ip link show "$LAB_BRIDGE" >/dev/null 2>&1; then
    ip link add "$LAB_BRIDGE" type bridge
  fi
  ip addr replace "$LAB_GW/24" dev "$LAB_BRIDGE"
  ip link set "$LAB_BRIDGE" up
}

ensure_netns() {
  local name=$1 ip
  ip=$(host_ip "$name")
  ip netns list 2>/dev/null | grep -qw "^$name" || ip netns add "$name"
  if ! ip link show "veth-$name" >/dev/null 2>&1; then
    ip link add "veth-$name" type veth peer name eth0 netns "$name"
  fi
  ip link set "veth-$name" master "$LAB_BRIDGE" up
  ip -n "$name" addr replace "$ip/24" dev eth0
  ip -n "$name" link set lo up
  ip -n "$name" link set eth0 up
}

# The engine link between LAB_LINK_HOSTS, once both namespaces exist: one veth pair, eth1 at each
# end, no bridge and no address on this side (a direct cable). Deleting either netns deletes it;
# the next up makes it again. An MTU the mtu fault set stays until its undo. This machine gets an
# unreachable route for the link's subnet, as a LAN host has no route to a Spark pair's cable: a
# connection to a link address fails at once here and never leaves the machine.
ensure_link() {
  local a=${LAB_LINK_HOSTS[0]} b=${LAB_LINK_HOSTS[1]} h names
  ip route replace unreachable "$LAB_LINK_NET.0/24"
  # Read whole, then matched: `ip netns list | grep -q` fails under pipefail when grep stops early.
  names=$(ip netns list 2>/dev/null | awk '{ print $1 }')
  grep -qx "$a" <<<"$names" && grep -qx "$b" <<<"$names" || return 0
  if ! ip -n "$a" link show "$LAB_LINK_IF" >/dev/null 2>&1; then
    ip -n "$b" link del "$LAB_LINK_IF" 2>/dev/null || true
    ip link add "$LAB_LINK_IF" netns "$a" type veth peer name "$LAB_LINK_IF" netns "$b"
  fi
  for h in "$a" "$b"; do
    ip -n "$h" addr replace "$(link_ip "$h")/24" dev "$LAB_LINK_IF"
    ip -n "$h" link set "$LAB_LINK_IF" up
  done
}

# The host's /sys/class/net as a real host's: nspawn's /sys is this machine's sysfs, which lists the
# root namespace's interfaces (br-lab, veth-lab*), not the host's own eth0 and eth1. A sysfs mounted
# from inside the host's netns lists its own; its class/net and devices/virtual/net (where those
# entries point) are bound over nspawn's. Ansible's network facts and gpu_preflight_info read them.
netns_sysfs() {
  local name=$1
  host_exec "$name" sh -c 'mountpoint -q /run/lab-sysfs && exit 0
    mkdir -p /run/lab-sysfs && mount -t sysfs -o ro,nosuid,nodev,noexec lab-sysfs /run/lab-sysfs &&
    mount --bind /run/lab-sysfs/class/net /sys/class/net &&
    mount --bind /run/lab-sysfs/devices/virtual/net /sys/devices/virtual/net' ||
    die "$name: could not mount a sysfs of its own network namespace"
}

# Identity that must differ per host, written into the host's own overlay layer.
write_identity() {
  local name=$1 m=$2
  [[ -s $m/etc/machine-id ]] || tr -d - </proc/sys/kernel/random/uuid >"$m/etc/machine-id"
  echo "$name" >"$m/etc/hostname"
  # Debian installer style: own name on 127.0.1.1, no peers (the lab has no site DNS: use addresses).
  cat >"$m/etc/hosts" <<EOF
127.0.0.1	localhost
127.0.1.1	$name
::1	localhost ip6-localhost ip6-loopback
EOF
  install -d -m 0700 "$m/root/.ssh"
  install -m 0600 "$SSH_KEY.pub" "$m/root/.ssh/authorized_keys"
  # The test bed's own speed-up, not the toolkit's: the system Python keeps the bytecode of
  # what Ansible's module payloads import (lab/python/lab_zipimport_cache.py). vLLM's venv
  # does not read the system site-packages.
  install -m 0644 "$LAB_ROOT/python/lab_zipimport_cache.py" "$m/usr/lib/python3/dist-packages/"
  echo "import lab_zipimport_cache" >"$m/usr/lib/python3/dist-packages/lab_zipimport_cache.pth"
}

start_host() {
  local name=$1 d=$HOSTS_DIR/$1
  host_running "$name" && return 0
  ensure_netns "$name"
  mkdir -p "$d/upper" "$d/work" "$d/merged"
  mountpoint -q "$d/merged" ||
    mount -t overlay overlay -o "lowerdir=$BASE,upperdir=$d/upper,workdir=$d/work" "$d/merged"
  write_identity "$name" "$d/merged"
  rm -f "$STATE_DIR/$name.stopping" "$STATE_DIR/$name.host-stop"
  # Detached (own session), the lab lock (fd 9) not inherited; its output is the console log.
  # CAP_NET_ADMIN: nspawn drops it with --network-namespace-path; the host's own netns is
  # private, and ray_cluster's firewall (nftables) needs it, as on a real engine host.
  # RLIMIT_MEMLOCK: the engine's units raise it to infinity for RDMA (vllm_fleet_limit_memlock),
  # which a real host's systemd may (CAP_SYS_RESOURCE); nspawn keeps that capability from the
  # host's PID 1, so the hard limit starts where a real host lets systemd raise it.
  setsid "$LAB_ROOT/lib/nspawn-host.sh" "$name" "$d/merged" "$STATE_DIR/$name.stopping" \
    --capability=CAP_NET_ADMIN --rlimit=RLIMIT_MEMLOCK=infinity \
    --bind-ro="$APTREPO:/srv/aptrepo" --bind-ro="$WHEELS:/wheels" --bind-ro="$MODELS:/srv/models" \
    </dev/null >>"$LOG_DIR/$name.console.log" 2>&1 9>&- &
  echo $! >"$STATE_DIR/$name.pid"
}

# Wait until sshd answers on every named host, with progress and a deadline.
wait_ssh() {
  local deadline=$((SECONDS + LAB_UP_TIMEOUT)) pending=("$@") next=() h last=$SECONDS
  while ((${#pending[@]})); do
    next=()
    for h in "${pending[@]}"; do
      if ssh_ok "$h"; then
        log "  $h ($(host_ip "$h")): sshd answers"
      elif ! host_running "$h"; then
        show_log_tail "$LOG_DIR/$h.console.log" 30
        die "$h: systemd-nspawn exited during boot; console log: $LOG_DIR/$h.console.log"
      else
        next+=("$h")
      fi
    done
    pending=("${next[@]}")
    ((${#pending[@]})) || break
    if ((SECONDS >= deadline)); then
      for h in "${pending[@]}"; do show_log_tail "$LOG_DIR/$h.console.log" 30; done
      die "sshd did not answer on ${pending[*]} within ${LAB_UP_TIMEOUT}s; console logs under $LOG_DIR; debug: \`lab/lab.sh status\`"
    fi
    if ((SECONDS - last >= 5)); then
      log "  waiting for sshd on ${pending[*]} ($((LAB_UP_TIMEOUT - (deadline - SECONDS)))s)"
      last=$SECONDS
    fi
    sleep 0.3
  done
}

# ---- up ------------------------------------------------------------------------------------------
cmd_up() {
  local n=${1:-3}
  [[ $n =~ ^[1-9]$ ]] || die "usage: lab.sh up [N]  (N = number of hosts, 1..$LAB_MAX_HOSTS; default 3)"
  need_root
  need_cmds systemd-nspawn ssh ip nsenter
  built_ok || die "lab artefacts missing (base, apt repo, wheelhouse, ssh key or model under $LAB_DIR): run \`lab/lab.sh build\` first"
  local t0 i name todo=() waitfor=()
  t0=$(now_ms)
  for ((i = 1; i <= n; i++)); do
    name=lab$i
    if host_running "$name" && ssh_ok "$name"; then continue; fi
    todo+=("$name")
  done
  if ((${#todo[@]} == 0)); then
    log "up: lab1..lab$n already up and answering ssh; nothing to do"
    return 0
  fi
  mkdir -p "$HOSTS_DIR" "$LOG_DIR" "$STATE_DIR"
  ensure_runtime_mounts
  ensure_bridge
  for name in "${todo[@]}"; do
    if host_running "$name"; then
      waitfor+=("$name")
      continue
    fi
    [[ -e $STATE_DIR/$name.host-stop ]] && ip link set "veth-$name" up 2>/dev/null
    start_host "$name"
    log "up: $name ($(host_ip "$name")) booting (console: $LOG_DIR/$name.console.log)"
    waitfor+=("$name")
  done
  ensure_link
  wait_ssh "${waitfor[@]}"
  for name in "${waitfor[@]}"; do netns_sysfs "$name"; done
  log "up: ${todo[*]} ready in $(secs_since "$t0")s (ssh: lab/lab.sh ssh HOST; ansible: .venv/bin/ansible all -i inventory/lab -m ansible.builtin.ping)"
}

# ---- down ----------------------------------------------------------------------------------------
# Every host the lab knows about, from any trace it leaves (pid file, dir, netns, cgroup).
known_hosts() {
  {
    find "$STATE_DIR" -maxdepth 1 -name 'lab[1-9].pid' -printf '%f\n' 2>/dev/null | sed 's/\.pid$//'
    find "$HOSTS_DIR" -mindepth 1 -maxdepth 1 -name 'lab[1-9]' -printf '%f\n' 2>/dev/null
    ip netns list 2>/dev/null | awk '$1 ~ /^lab[1-9]$/ { print $1 }'
    find /sys/fs/cgroup/{systemd,unified,cpu}/"$LAB_CGROUP" -mindepth 1 -maxdepth 1 -name 'lab[1-9]' -printf '%f\n' 2>/dev/null
  } | sort -u
}

# Stop host $1's nspawn: clean halt (SIGTERM, as `poweroff` would) or, past the deadline or when
# asked (hard), SIGKILL of its PID 1, which ends its whole PID namespace at once.
stop_nspawn() {
  local name=$1 mode=${2:-clean} timeout=${3:-$LAB_STOP_TIMEOUT} pid init deadline
  pid=$(wrapper_pid "$name")
  host_running "$name" || pid=
  touch "$STATE_DIR/$name.stopping"
  if [[ $mode == clean && -n $pid ]]; then
    kill -TERM "$pid" 2>/dev/null
    deadline=$((SECONDS + timeout))
    while host_running "$name" && ((SECONDS < deadline)); do sleep 0.2; done
    host_running "$name" && warn "$name: no clean halt within ${timeout}s; killing it"
  fi
  if init=$(host_init_pid "$name"); then kill -KILL "$init" 2>/dev/null; fi
  deadline=$((SECONDS + 10))
  while host_running "$name" && ((SECONDS < deadline)); do sleep 0.2; done
  if host_running "$name"; then
    pkill -KILL -P "$pid" 2>/dev/null
    kill -KILL "$pid" 2>/dev/null
  fi
  # Anything left in the host's cgroups (nothing, normally: the PID namespace died with PID 1).
  local p
  for p in $(host_pids "$name"); do kill -KILL "$p" 2>/dev/null; done
  rm -f "$STATE_DIR/$name.pid"
}

# Delete the removed hosts' disks in the background (destroy_host moved them
# to $TRASH_DIR); never below a mount point.
sweep_trash() {
  [[ -d $TRASH_DIR ]] && [[ -n "$(ls -A "$TRASH_DIR")" ]] || return 0
  if findmnt -rn -o TARGET | grep -q "^$TRASH_DIR/"; then
    warn "mounts remain under $TRASH_DIR; not deleting it (see: findmnt | grep $TRASH_DIR)"
    return 0
  fi
  setsid nice -n 19 rm -rf "$TRASH_DIR" </dev/null >/dev/null 2>&1 &
}

rm_cgroup_tree() { [[ -d $1 ]] && find "$1" -depth -type d -exec rmdir {} + 2>/dev/null; [[ ! -d $1 ]]; }

destroy_host() {
  local name=$1 d=$HOSTS_DIR/$1 t0 t1 i
  t0=$(now_ms)
  # Hard: the disk is thrown away below, so a clean halt (waiting out vLLM's and
  # Ray's stop timeouts, up to a minute) would buy nothing.
  stop_nspawn "$name" hard
  t1=$(now_ms)
  fault_clear_host "$name"
  if mountpoint -q "$d/merged" 2>/dev/null; then
    for i in 1 2 3 4 5 6 7 8 9 10; do
      umount "$d/merged" 2>/dev/null && break
      sleep 0.3
    done
    if mountpoint -q "$d/merged"; then
      warn "$name: overlay busy, detaching it (umount -l)"
      umount -l "$d/merged"
    fi
  fi
  # Never rm -rf while anything is still mounted below the host dir (it would go into the base).
  if findmnt -rn -o TARGET | grep -q "^$d/"; then
    die "$name: mounts remain under $d; not removing it (see: findmnt | grep $d)"
  fi
  # The upper dir holds the host's vLLM venv (tens of thousands of files: a
  # minute or more to delete). It is renamed out of the way at once and deleted
  # in the background, detached from the caller's output, so a teardown does
  # not wait for the disk; the next down sweeps what a killed sweep left.
  local trash
  trash=$TRASH_DIR/$name.$(now_ms)
  mkdir -p "$TRASH_DIR" && mv "$d" "$trash" || rm -rf "$d"
  ip netns del "$name" 2>/dev/null
  ip link del "veth-$name" 2>/dev/null
  local h
  for h in systemd unified cpu; do
    rm_cgroup_tree "/sys/fs/cgroup/$h/$LAB_CGROUP/$name" || warn "$name: cgroup /sys/fs/cgroup/$h/$LAB_CGROUP/$name not removable (processes left?)"
  done
  rm -f "$STATE_DIR/$name".*
  log "down: $name removed ($(secs_since "$t0")s: halt $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", (b - a) / 1000 }')s, then disk and network)"
}

cmd_down() {
  need_root
  local hosts t0 did=0
  t0=$(now_ms)
  mapfile -t hosts < <(known_hosts)
  local name
  for name in "${hosts[@]}"; do
    destroy_host "$name"
    did=1
  done
  local h
  for h in systemd unified cpu; do
    [[ -d /sys/fs/cgroup/$h/$LAB_CGROUP ]] && { rm_cgroup_tree "/sys/fs/cgroup/$h/$LAB_CGROUP" || warn "cgroup /sys/fs/cgroup/$h/$LAB_CGROUP not removable"; did=1; }
  done
  if ip link show "$LAB_BRIDGE" >/dev/null 2>&1; then
    ip link del "$LAB_BRIDGE"
    did=1
  fi
  ip route del unreachable "$LAB_LINK_NET.0/24" 2>/dev/null && did=1
  if [[ -e $STATE_DIR/made-nspawn-tmpfs ]] && ! pgrep -x systemd-nspawn >/dev/null; then
    umount /run/systemd/nspawn 2>/dev/null && rm -f "$STATE_DIR/made-nspawn-tmpfs"
    [[ -e $STATE_DIR/made-nspawn-dir ]] && rmdir /run/systemd/nspawn 2>/dev/null && rm -f "$STATE_DIR/made-nspawn-dir"
    did=1
  fi
  if [[ -e $STATE_DIR/made-run-netns ]] && [[ -z "$(ls -A /run/netns 2>/dev/null)" ]]; then
    mountpoint -q /run/netns 2>/dev/null && umount /run/netns 2>/dev/null
    rm -f "$STATE_DIR/made-run-netns"
    did=1
  fi
  if [[ -e $STATE_DIR/made-run-netns-dir ]] && ! mountpoint -q /run/netns 2>/dev/null; then
    rmdir /run/netns 2>/dev/null
    rm -f "$STATE_DIR/made-run-netns-dir"
  fi
  rm -rf "$STATE_DIR"
  sweep_trash
  if ((did)); then
    log "down: lab torn down in $(secs_since "$t0")s (built artefacts kept under $LAB_DIR)"
  else
    log "down: nothing to tear down (no lab hosts, netns, bridge, mounts or cgroups)"
  fi
}

# ---- status, ssh ---------------------------------------------------------------------------------
cmd_status() {
  local name state extra f
  echo "lab dir: $LAB_DIR"
  for f in base aptrepo wheelhouse model; do
    printf '  %-10s %s\n' "$f" "$(stamp_get "$f" | grep -q . && echo built || echo 'not built')"
  done
  if ip link show "$LAB_BRIDGE" >/dev/null 2>&1; then echo "bridge $LAB_BRIDGE: $LAB_GW/24"; else echo "bridge $LAB_BRIDGE: absent"; fi
  local h ends=()
  for h in "${LAB_LINK_HOSTS[@]}"; do
    ends+=("$h $(ip -n "$h" -o link show dev "$LAB_LINK_IF" 2>/dev/null | sed -n 's/.* mtu \([0-9]*\) .* state \([A-Z]*\) .*/\1 \2/p' | awk '{ printf "mtu %s %s", $1, $2 }')")
  done
  echo "link $LAB_LINK_IF ($LAB_LINK_NET.0/24): ${ends[0]} <-> ${ends[1]}"
  local hosts
  mapfile -t hosts < <(known_hosts)
  ((${#hosts[@]})) || {
    echo "hosts: none (lab/lab.sh up)"
    return 0
  }
  for name in "${hosts[@]}"; do
    if host_running "$name"; then
      state="running (nspawn wrapper pid $(wrapper_pid "$name"), init pid $(host_init_pid "$name" || echo ?))"
      if ssh_ok "$name"; then state+=", ssh ok"; else state+=", ssh NOT answering"; fi
    elif [[ -e $STATE_DIR/$name.host-stop ]]; then
      state="stopped by \`fault host-stop\` (undo: lab/lab.sh fault host-start $name)"
    else
      state="not running (leftovers: lab/lab.sh down)"
    fi
    extra=$(fault_list "$name")
    printf '%-5s %-12s %s%s\n' "$name" "$(host_ip "$name")" "$state" "${extra:+; faults: $extra}"
  done
}

cmd_ssh() {
  local name=${1:-}
  [[ -n $name ]] || die "usage: lab.sh ssh HOST [COMMAND...]"
  check_host_name "$name"
  shift
  local tty=()
  (($# == 0)) && [[ -t 0 ]] && tty=(-t)
  exec ssh "${SSH_OPTS[@]}" "${tty[@]}" "root@$(host_ip "$name")" "$@"
}
