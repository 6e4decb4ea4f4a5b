"""Bring an engine back after a power cut: the logic of vllm-fleet-recover.

Stdlib only, Python 3.11: the role copies this file and ray_cluster.py to each
engine host (/usr/local/lib/vllm-fleet/), where roles/engine_recovery's thin
runner calls :func:`run`. The playbooks never import it. The role names both
files by their paths here, at the top of plugins/module_utils/.

Two triggers, both tied to a boot (docs/provisioning.md, "After a power cut"):

* ``boot``: vllm-fleet-recover.service, once per boot of an engine host. The
  head waits (bounded) for every peer's host to answer, starts the Ray head,
  waits until every node joined, starts vLLM and waits for /health 200; a
  worker waits for the head's rendezvous port (Ray's GCS, or vLLM's master
  port under mp) and starts its unit, then stays until the head serves.
* ``check``: vllm-fleet-recover-check.timer, every 30 s. On the head it acts
  only when /health read 503 twice in a row and a peer's Ray node is one that
  joined after vLLM started (a node id not among those the check recorded
  while the engine served): that node's host booted. On a worker it starts
  the worker's unit only while the head holds its join barrier (the head's
  rendezvous port answers, its API port does not: vLLM is not running there).
  A crashed rank, a killed Ray worker or a wedged engine meet none of these.

Every decision is :func:`decide`: what was seen in, one action and a
one-line reason out. Nothing here acts while a playbook's lease is live, and
nothing acts without the engine-wanted marker.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field, fields

try:  # under Ansible (the unit tests) and on the host (next to it)
    from ansible.module_utils.ray_cluster import PROBE, RayProbeError, parse_probe_output
except ImportError:  # pragma: no cover - the host's copy
    from ray_cluster import PROBE, RayProbeError, parse_probe_output

SCHEMA = 1
ROLES = ("head", "worker")
BACKENDS = ("ray", "mp")
MODES = ("boot", "check")
# What decide() may answer.
DONE, WAIT, DEFER, GIVE_UP = "done", "wait", "defer", "give-up"
START_RAY, START_VLLM, START_OWN, REJOIN = "start-ray", "start-vllm", "start-own", "rejoin"
FAIL_ATTEMPT, PROBE_NODES, RECORD_NODES, RESTART, RECOVER = (
    "fail-attempt", "probe-nodes", "record-nodes", "restart-engine", "recover")
# Head phases of one attempt.
IDLE, RAY_STARTED, VLLM_STARTED = "idle", "ray-started", "vllm-started"
# A health status the head's check restarts on (VLLM_KEEP_ALIVE_ON_ENGINE_DEATH).
DEAD = 503
# How many 503s in a row the check needs.
DEAD_STREAK = 2


class ConfigError(ValueError):
    """recover.json is not what the role writes."""


@dataclass(frozen=True)
class Config:
    """/etc/vllm-fleet/recover.json, as roles/engine_recovery templates it."""
    engine: str
    role: str
    backend: str
    vllm_unit: str
    ray_unit: str
    head_address: str
    ray_port: int
    master_port: int
    peers: tuple = ()
    health_url: str = ""
    api_address: str = ""
    api_port: int = 0
    peer_port: int = 22
    python: str = ""
    user: str = ""
    marker: str = "/var/lib/vllm-fleet/engine-wanted"
    state_file: str = "/var/lib/vllm-fleet/recover-state.json"
    lease_file: str = "/run/vllm-fleet/lease.json"
    max_attempts: int = 3
    backoff_s: float = 30.0
    backoff_max_s: float = 600.0
    peer_wait_s: float = 900.0
    join_timeout_s: float = 180.0
    ready_timeout_s: float = 900.0
    worker_wait_s: float = 3600.0
    poll_s: float = 5.0
    progress_s: float = 30.0
    check_interval_s: float = 30.0
    probe_max_interval_s: float = 480.0

    @property
    def rendezvous_port(self) -> int:
        """The head's port a worker waits for: Ray's GCS, or vLLM's master port (mp)."""
        return self.ray_port if self.backend == "ray" else self.master_port

    @property
    def peers_all(self) -> tuple:
        """Every node of the engine: the head and its peers."""
        return (self.head_address,) + tuple(p for p in self.peers if p != self.head_address)

    @property
    def own_unit(self) -> str:
        """The unit a worker runs: its Ray node, or its headless vLLM (mp)."""
        return self.ray_unit if self.backend == "ray" else self.vllm_unit


REQUIRED = ("engine", "role", "backend", "vllm_unit", "ray_unit", "head_address", "ray_port", "master_port")
_INTS = {"ray_port", "master_port", "peer_port", "max_attempts", "api_port"}
_FLOATS = {"backoff_s", "backoff_max_s", "peer_wait_s", "join_timeout_s", "ready_timeout_s", "worker_wait_s",
           "poll_s", "progress_s", "check_interval_s", "probe_max_interval_s"}


def parse_config(raw) -> Config:
    """recover.json (decoded) as a :class:`Config`; ConfigError says what is wrong."""
    if not isinstance(raw, dict):
        raise ConfigError("recover.json must hold an object")
    known = {f.name for f in fields(Config)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"recover.json has unknown keys: {', '.join(unknown)}")
    missing = [key for key in REQUIRED if key not in raw]
    if missing:
        raise ConfigError(f"recover.json lacks {', '.join(missing)}")
    values = dict(raw)
    for key in _INTS:
        if key in values and (isinstance(values[key], bool) or not isinstance(values[key], int)):
            raise ConfigError(f"{key} must be an integer, got {values[key]!r}")
    for key in _FLOATS:
        if key in values:
            if isinstance(values[key], bool) or not isinstance(values[key], (int, float)) or values[key] < 0:
                raise ConfigError(f"{key} must be a number of seconds, 0 or more, got {values[key]!r}")
            values[key] = float(values[key])
    if values["role"] not in ROLES:
        raise ConfigError(f"role must be one of {', '.join(ROLES)}, got {values['role']!r}")
    if values["backend"] not in BACKENDS:
        raise ConfigError(f"backend must be one of {', '.join(BACKENDS)}, got {values['backend']!r}")
    if values.get("max_attempts", 1) < 1:
        raise ConfigError("max_attempts must be 1 or more")
    peers = values.get("peers", ())
    if not isinstance(peers, (list, tuple)) or not all(isinstance(p, str) for p in peers):
        raise ConfigError("peers must be a list of addresses")
    values["peers"] = tuple(peers)
    return Config(**values)


@dataclass
class State:
    """/var/lib/vllm-fleet/recover-state.json: what the recovery did last, per boot."""
    schema: int = SCHEMA
    boot_id: str = ""
    # Attempts since the engine last served (a served engine resets them).
    attempts: int = 0
    phase: str = IDLE
    phase_since: float = 0.0
    next_attempt_at: float = 0.0
    waiting_since: float = 0.0
    gave_up: bool = False
    # The boot recovery stopped waiting for peers that never answered: the
    # head's check takes it up again once they do (the same boot).
    peers_overdue: bool = False
    last_action: str = ""
    last_reason: str = ""
    last_failure: str = ""
    at: float = 0.0
    # The head's check: 503s in a row, and when it may next ask Ray.
    dead_streak: int = 0
    probe_next_at: float = 0.0
    probe_interval_s: float = 0.0
    # A worker's boot run: the head's vLLM answered 503 while this node waited (a
    # dead engine, which the head's check restarts as a whole), and when its API
    # then closed (that restart began).
    head_seen_dead: bool = False
    head_down_at: float = 0.0
    # Ray node ids while the engine served, keyed by vLLM's systemd InvocationID.
    engine_invocation: str = ""
    engine_nodes: dict = field(default_factory=dict)

    @classmethod
    def from_json(cls, text: str, boot_id: str) -> "State":
        """The state of this boot: a file from an earlier boot or unreadable starts afresh,
        except what outlives a boot (the node record: it is keyed by vLLM's own start)."""
        try:
            raw = json.loads(text)
        except (TypeError, ValueError, RecursionError):
            return cls(boot_id=boot_id)
        if not isinstance(raw, dict) or raw.get("schema") != SCHEMA:
            return cls(boot_id=boot_id)
        known = {f.name for f in fields(cls)}
        try:
            state = cls(**{k: v for k, v in raw.items() if k in known})
        except TypeError:
            return cls(boot_id=boot_id)
        defaults = cls()
        for f in fields(cls):
            want, got = type(getattr(defaults, f.name)), getattr(state, f.name)
            ok = isinstance(got, (int, float)) and not isinstance(got, bool) if want is float else \
                isinstance(got, want) and (want is bool or not isinstance(got, bool))
            if not ok:  # a hand-edited or foreign file: start afresh
                return cls(boot_id=boot_id)
        if state.boot_id != boot_id:
            return cls(boot_id=boot_id, attempts=0, engine_invocation=state.engine_invocation,
                       engine_nodes=dict(state.engine_nodes or {}))
        return state

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, indent=1) + "\n"


@dataclass(frozen=True)
class Observation:
    """What one look at the host saw. ``units``: unit name -> ActiveState.
    ``health``: the HTTP status of /health, or None (no answer). ``nodes_missing``
    and ``nodes_new``: None when Ray was not asked."""
    now: float
    wanted: bool = True
    lease_until: float = 0.0
    lease_holder: str = ""
    units: dict = field(default_factory=dict)
    peers_down: tuple = ()
    rendezvous_open: bool = False
    api_open: bool = False
    health: int | None = None
    nodes_missing: tuple | None = None
    nodes_new: tuple | None = None
    vllm_invocation: str = ""

    def active(self, unit: str) -> bool:
        return self.units.get(unit) in ("active", "activating", "reloading")

    @property
    def lease_live(self) -> bool:
        return self.lease_until > self.now


@dataclass(frozen=True)
class Decision:
    action: str
    reason: str
    wait_s: float = 0.0


def backoff(cfg: Config, attempts: int) -> float:
    """Seconds to wait after ``attempts`` failed attempts: doubles from backoff_s, capped."""
    if attempts <= 0:
        return 0.0
    return min(cfg.backoff_s * 2 ** min(attempts - 1, 32), cfg.backoff_max_s)


def _secs(value: float) -> str:
    return f"{value:.0f} s"


def decide(cfg: Config, st: State, ob: Observation, mode: str = "boot") -> Decision:
    """The next action and why, from what was seen. Pure: no clock, no I/O."""
    if not ob.wanted:
        return Decision(DONE, f"not wanted: {cfg.marker} is absent (the engine was stopped on purpose)")
    if ob.lease_live:
        holder = f" ({ob.lease_holder})" if ob.lease_holder else ""
        if mode == "check":
            return Decision(DONE, f"a playbook holds the lease{holder}: it owns the engine's units")
        return Decision(DEFER, f"a playbook holds the lease{holder} for {_secs(ob.lease_until - ob.now)} more:"
                        " waiting, it owns the engine's units", min(cfg.poll_s, ob.lease_until - ob.now))
    if cfg.role == "head":
        return _check_head(cfg, st, ob) if mode == "check" else _boot_head(cfg, st, ob)
    return _check_worker(cfg, st, ob) if mode == "check" else _boot_worker(cfg, st, ob)


def _boot_head(cfg: Config, st: State, ob: Observation) -> Decision:
    if st.phase == IDLE and ob.health == 200 and ob.active(cfg.vllm_unit):
        return Decision(DONE, "the engine serves (/health 200)")
    if st.phase == IDLE:
        if st.attempts >= cfg.max_attempts:
            return Decision(GIVE_UP, f"gave up after {st.attempts} attempt(s): {st.last_failure}. The engine"
                            " stays down; fix the cause, then run site.yml")
        if ob.now < st.next_attempt_at:
            return Decision(WAIT, f"backing off {_secs(st.next_attempt_at - ob.now)} after attempt {st.attempts}"
                            f" failed: {st.last_failure}", min(cfg.poll_s, st.next_attempt_at - ob.now))
        if ob.peers_down:
            waited = ob.now - st.waiting_since
            if waited >= cfg.peer_wait_s:
                return Decision(GIVE_UP, f"peer(s) {', '.join(ob.peers_down)} did not answer within"
                                f" {_secs(cfg.peer_wait_s)}: no partial group serves, the engine stays down."
                                " The head's check starts it once they answer")
            return Decision(WAIT, f"waiting for peer(s) {', '.join(ob.peers_down)} to answer"
                            f" ({_secs(waited)} of {_secs(cfg.peer_wait_s)})", cfg.poll_s)
        if ob.active(cfg.vllm_unit) or (cfg.backend == "ray" and ob.active(cfg.ray_unit)):
            # A half-up engine (a restart, a dead engine): the whole group starts over.
            return Decision(FAIL_ATTEMPT, "units left running from before: stopping them to start in order")
        if cfg.backend == "ray":
            return Decision(START_RAY, f"attempt {st.attempts + 1} of {cfg.max_attempts}: every peer answers,"
                            " starting the Ray head")
        return Decision(START_VLLM, f"attempt {st.attempts + 1} of {cfg.max_attempts}: every peer answers,"
                        " starting vLLM (mp)")
    elapsed = ob.now - st.phase_since
    if st.phase == RAY_STARTED:
        if not ob.active(cfg.ray_unit):
            return Decision(FAIL_ATTEMPT, f"the Ray head's unit stopped ({ob.units.get(cfg.ray_unit, 'unknown')})")
        if ob.nodes_missing is None:
            return Decision(PROBE_NODES, "asking Ray which nodes joined")
        if ob.nodes_missing:
            if elapsed >= cfg.join_timeout_s:
                return Decision(FAIL_ATTEMPT, f"node(s) {', '.join(ob.nodes_missing)} did not join within"
                                f" {_secs(cfg.join_timeout_s)}")
            return Decision(WAIT, f"waiting for node(s) {', '.join(ob.nodes_missing)} to join"
                            f" ({_secs(elapsed)} of {_secs(cfg.join_timeout_s)})", cfg.poll_s)
        return Decision(START_VLLM, "every node joined: starting vLLM")
    # VLLM_STARTED
    if cfg.backend == "ray" and not ob.active(cfg.ray_unit):
        return Decision(FAIL_ATTEMPT, f"the Ray head's unit stopped ({ob.units.get(cfg.ray_unit, 'unknown')})")
    if not ob.active(cfg.vllm_unit):
        return Decision(FAIL_ATTEMPT, f"{cfg.vllm_unit} stopped while starting"
                        f" ({ob.units.get(cfg.vllm_unit, 'unknown')}; see journalctl -u {cfg.vllm_unit})")
    if ob.health == 200:
        return Decision(DONE, f"the engine serves again (/health 200 after {_secs(elapsed)},"
                        f" attempt {st.attempts})")
    if ob.health == DEAD:
        return Decision(FAIL_ATTEMPT, "the engine died while starting (/health 503)")
    if elapsed >= cfg.ready_timeout_s:
        return Decision(FAIL_ATTEMPT, f"no /health 200 within {_secs(cfg.ready_timeout_s)}")
    return Decision(WAIT, f"waiting for /health 200 ({_secs(elapsed)} of {_secs(cfg.ready_timeout_s)})",
                    cfg.poll_s)


def _boot_worker(cfg: Config, st: State, ob: Observation) -> Decision:
    unit = cfg.own_unit
    waited = ob.now - st.waiting_since
    if ob.health == 200 and ob.active(unit):
        return Decision(DONE, "the engine serves (the head's /health 200)")
    if st.phase != IDLE and not ob.active(unit):
        return _worker_stopped(cfg, st, ob)
    if waited >= cfg.worker_wait_s:
        return Decision(GIVE_UP, f"the head did not serve within {_secs(cfg.worker_wait_s)} of this boot;"
                        f" {unit} is left as it is. Run site.yml")
    if ob.active(unit) and st.phase != IDLE and st.head_down_at and st.attempts < cfg.max_attempts \
            and ob.now >= st.next_attempt_at:
        # The head's check restarts the whole engine: its new Ray drops this node, which would
        # linger until Ray's own GCS timeout (a minute). Join the new head once its Ray is up
        # (a poll after its API closed: the old Ray stops in seconds).
        if ob.rendezvous_open and ob.now - st.head_down_at >= cfg.poll_s:
            return Decision(REJOIN, f"the head stopped its dead vLLM to restart the whole engine, whose new Ray"
                            f" drops this node: attempt {st.attempts + 1} of {cfg.max_attempts}, restarting {unit}")
        return Decision(WAIT, "the head restarts the whole engine: waiting for its new Ray head", cfg.poll_s)
    if ob.active(unit):
        return Decision(WAIT, f"{unit} runs; waiting for the head to serve ({_secs(waited)} of"
                        f" {_secs(cfg.worker_wait_s)})", cfg.poll_s)
    if st.attempts >= cfg.max_attempts:
        return Decision(GIVE_UP, f"gave up after {st.attempts} attempt(s): {st.last_failure}. Run site.yml")
    if ob.now < st.next_attempt_at:
        return Decision(WAIT, f"backing off {_secs(st.next_attempt_at - ob.now)} after attempt {st.attempts}"
                        f" failed: {st.last_failure}", min(cfg.poll_s, st.next_attempt_at - ob.now))
    if not ob.rendezvous_open:
        return Decision(WAIT, f"waiting for the head {cfg.head_address}:{cfg.rendezvous_port} to answer"
                        f" ({_secs(waited)} of {_secs(cfg.worker_wait_s)})", cfg.poll_s)
    return Decision(START_OWN, f"attempt {st.attempts + 1} of {cfg.max_attempts}: the head"
                    f" {cfg.head_address}:{cfg.rendezvous_port} answers, starting {unit}")


def _check_head(cfg: Config, st: State, ob: Observation) -> Decision:
    if st.peers_overdue and not ob.active(cfg.vllm_unit):
        if ob.peers_down:
            return Decision(DONE, f"still waiting for peer(s) {', '.join(ob.peers_down)} (this boot's recovery"
                            " stopped waiting)")
        return Decision(RECOVER, "every peer answers now: taking this boot's recovery up again")
    if not ob.active(cfg.vllm_unit):
        return Decision(DONE, f"{cfg.vllm_unit} is not running and this host did not just boot: nothing to do")
    if ob.health == 200:
        if cfg.backend == "ray" and ob.vllm_invocation and st.engine_invocation != ob.vllm_invocation:
            return Decision(RECORD_NODES, "the engine serves: recording its Ray nodes for this start")
        return Decision(DONE, "the engine serves (/health 200)")
    if ob.health != DEAD:
        return Decision(DONE, f"/health {ob.health or 'does not answer'}: not a dead engine (loading or"
                        " wedged): not the recovery's to act on")
    if st.dead_streak + 1 < DEAD_STREAK:
        return Decision(DONE, "/health 503 once: checking again")
    if cfg.backend == "mp":
        return Decision(DONE, "the engine is dead (/health 503); under mp the head cannot tell a peer's boot:"
                        " run playbooks/rolling-restart.yml")
    if ob.peers_down:
        return Decision(DONE, f"the engine is dead (/health 503); peer(s) {', '.join(ob.peers_down)} do not"
                        " answer: waiting for their hosts to boot")
    if ob.nodes_missing is None:
        if ob.now < st.probe_next_at:
            return Decision(DONE, f"the engine is dead (/health 503); next look at Ray in"
                            f" {_secs(st.probe_next_at - ob.now)}")
        return Decision(PROBE_NODES, "the engine is dead (/health 503): asking Ray which nodes are alive")
    if ob.nodes_missing:
        return Decision(DONE, f"the engine is dead (/health 503); node(s) {', '.join(ob.nodes_missing)} not"
                        " joined: waiting for their hosts to boot")
    if st.engine_invocation != ob.vllm_invocation or not st.engine_nodes:
        return Decision(DONE, "the engine is dead (/health 503) and its nodes were never recorded while it"
                        " served: not restarting (run playbooks/rolling-restart.yml)")
    if not ob.nodes_new:
        return Decision(DONE, "the engine is dead (/health 503) but every Ray node is the one it started with:"
                        " no host booted, not the recovery's to act on (run playbooks/rolling-restart.yml)")
    if st.attempts >= cfg.max_attempts:
        return Decision(GIVE_UP, f"gave up after {st.attempts} attempt(s): {st.last_failure}. Run site.yml")
    if ob.now < st.next_attempt_at:
        return Decision(DONE, f"backing off {_secs(st.next_attempt_at - ob.now)} after attempt {st.attempts}"
                        f" failed: {st.last_failure}")
    return Decision(RESTART, f"node(s) {', '.join(ob.nodes_new)} rejoined after vLLM started (their host"
                    " booted) and the engine is dead (/health 503): restarting the whole engine")


def _worker_stopped(cfg: Config, st: State, ob: Observation) -> Decision:
    """The worker's unit stopped after this recovery started it. When the head restarts its Ray
    (the head's check, or the head's own boot), every node drops with the old head: if the head
    now waits for its nodes, join it again at once (an attempt, no backoff: the head's join wait
    is running); otherwise the attempt failed."""
    unit = cfg.own_unit
    stopped = f"{unit} stopped ({ob.units.get(unit, 'unknown')})"
    if ob.rendezvous_open and not ob.api_open and st.attempts < cfg.max_attempts and ob.now >= st.next_attempt_at:
        return Decision(START_OWN, f"{stopped} and the head waits for its nodes (a restart of its Ray drops"
                        f" every node): attempt {st.attempts + 1} of {cfg.max_attempts}, starting {unit} again")
    return Decision(FAIL_ATTEMPT, stopped)


def _check_worker(cfg: Config, st: State, ob: Observation) -> Decision:
    unit = cfg.own_unit
    if ob.active(unit):
        return Decision(DONE, f"{unit} runs")
    if st.phase != IDLE:
        return _worker_stopped(cfg, st, ob)
    if not ob.rendezvous_open:
        return Decision(DONE, f"the head's {cfg.head_address}:{cfg.rendezvous_port} does not answer: nothing to join")
    if ob.api_open:
        return Decision(DONE, f"{unit} is down but the head's vLLM runs: not a recovery the head started"
                        " (run playbooks/rolling-restart.yml)")
    if st.attempts >= cfg.max_attempts:
        return Decision(GIVE_UP, f"gave up after {st.attempts} attempt(s): {st.last_failure}. Run site.yml")
    if ob.now < st.next_attempt_at:
        return Decision(DONE, f"backing off {_secs(st.next_attempt_at - ob.now)} after attempt {st.attempts}"
                        f" failed: {st.last_failure}")
    return Decision(START_OWN, f"the head waits for its nodes (its {cfg.rendezvous_port} answers, its vLLM does"
                    f" not run): attempt {st.attempts + 1} of {cfg.max_attempts}, starting {unit}")


# --------------------------------------------------------------------------
# The loop, over a host's I/O (HostIO below; the tests pass a fake).


class Host:
    """What :func:`run` needs of a host. HostIO is the real one."""

    def now(self) -> float: ...
    def sleep(self, seconds: float) -> None: ...
    def boot_id(self) -> str: ...
    def read(self, path: str) -> str | None: ...
    def write(self, path: str, text: str) -> None: ...
    def exists(self, path: str) -> bool: ...
    def unit_state(self, unit: str) -> tuple: ...  # (ActiveState, InvocationID)
    def start(self, unit: str) -> None: ...
    def stop(self, unit: str) -> None: ...
    def answers(self, address: str, port: int) -> bool: ...
    def listens(self, address: str, port: int) -> bool: ...
    def health(self, url: str) -> int | None: ...
    def ray_nodes(self, cfg: Config) -> dict | None: ...  # alive node ip -> node id, None: no answer
    def log(self, line: str) -> None: ...
    def lock(self, wait: bool) -> bool: ...  # one run at a time; False: another holds it


def _lease(host: Host, cfg: Config) -> tuple:
    text = host.read(cfg.lease_file)
    if not text:
        return 0.0, ""
    try:
        raw = json.loads(text)
        return float(raw.get("expires_at", 0)), str(raw.get("holder", ""))[:200]
    except (ValueError, TypeError, AttributeError, RecursionError):
        # An unreadable lease counts as live for a poll: a playbook is writing it.
        return host.now() + cfg.poll_s, "unreadable lease file"


def observe(host: Host, cfg: Config, st: State, probe: bool = False) -> Observation:
    now = host.now()
    lease_until, holder = _lease(host, cfg)
    units, invocation = {}, ""
    for unit in {cfg.vllm_unit, cfg.ray_unit}:
        units[unit], inv = host.unit_state(unit)
        if unit == cfg.vllm_unit:
            invocation = inv
    peers_down = tuple(p for p in cfg.peers if not host.answers(p, cfg.peer_port)) if cfg.role == "head" else ()
    rendezvous = api = False
    if cfg.role == "worker":
        rendezvous = host.listens(cfg.head_address, cfg.rendezvous_port)
        api = host.listens(cfg.api_address, cfg.api_port) if cfg.api_port else False
    health = host.health(cfg.health_url) if cfg.health_url else None
    missing = new = None
    if probe:
        nodes = host.ray_nodes(cfg)
        if nodes is None:
            missing, new = tuple(cfg.peers_all), ()
        else:
            missing = tuple(ip for ip in cfg.peers_all if ip not in nodes)
            recorded = st.engine_nodes or {}
            new = tuple(ip for ip in cfg.peers if ip in nodes and recorded.get(ip) not in (None, nodes[ip]))
    return Observation(now=now, wanted=host.exists(cfg.marker), lease_until=lease_until, lease_holder=holder,
                       units=units, peers_down=peers_down, rendezvous_open=rendezvous, api_open=api,
                       health=health, nodes_missing=missing, nodes_new=new, vllm_invocation=invocation)


class Recovery:
    """One run of vllm-fleet-recover: observe, decide, act, record, until done."""

    def __init__(self, host: Host, cfg: Config, mode: str):
        self.host, self.cfg, self.mode = host, cfg, mode
        self.st = State.from_json(host.read(cfg.state_file) or "", host.boot_id())
        self._last_line, self._last_line_at = "", -1e18

    def say(self, decision: Decision, force: bool = False) -> None:
        now = self.host.now()
        line = f"{decision.action}: {decision.reason}"
        # A wait repeats its line at most every progress_s (the journal's progress).
        if force or decision.action != WAIT or now - self._last_line_at >= self.cfg.progress_s \
                or line.split("(")[0] != self._last_line.split("(")[0]:
            self.host.log(f"engine {self.cfg.engine}: {line}")
            self._last_line, self._last_line_at = line, now

    def record(self, decision: Decision) -> None:
        self.st.last_action, self.st.last_reason, self.st.at = decision.action, decision.reason, self.host.now()
        self.host.write(self.cfg.state_file, self.st.to_json())

    def _phase(self, phase: str) -> None:
        self.st.phase, self.st.phase_since = phase, self.host.now()

    def _fail(self, reason: str) -> None:
        """An attempt failed: stop what this host runs of the engine (no partial group), back off."""
        for unit in (self.cfg.vllm_unit, self.cfg.ray_unit) if self.cfg.role == "head" else (self.cfg.own_unit,):
            self.host.stop(unit)
        self.st.last_failure = reason
        self._phase(IDLE)
        self.st.next_attempt_at = self.host.now() + backoff(self.cfg, self.st.attempts)

    def run(self) -> int:
        """0: done or nothing to do; 1: gave up (the reason is in the journal and the state)."""
        if self.mode == "boot":
            self.st.gave_up, self.st.peers_overdue = False, False
            self.st.waiting_since = self.host.now()
            self._phase(IDLE)
        probe = False
        while True:
            ob = observe(self.host, self.cfg, self.st, probe=probe)
            if self.mode == "boot" and self.cfg.role == "worker":
                self._watch_head(ob)
            d = decide(self.cfg, self.st, ob, "boot" if self.mode == "boot" else "check")
            probe = False
            if d.action == PROBE_NODES:
                probe = True
                continue
            if self.mode == "check":
                return self._check_step(ob, d)
            if d.action == DEFER:
                # The playbook owns the units now: whatever this run started is its to converge.
                self._phase(IDLE)
                self.st.waiting_since = self.host.now()
            elif d.action == FAIL_ATTEMPT:
                self._fail(d.reason)
            elif d.action == START_RAY:
                self.st.attempts += 1
                self.host.start(self.cfg.ray_unit)
                self._phase(RAY_STARTED)
            elif d.action == START_VLLM:
                if self.st.phase == IDLE:
                    self.st.attempts += 1
                self.host.start(self.cfg.vllm_unit)
                self._phase(VLLM_STARTED)
            elif d.action == START_OWN:
                self.st.attempts += 1
                self.host.start(self.cfg.own_unit)
                self._phase(VLLM_STARTED)
            elif d.action == REJOIN:
                self.st.attempts += 1
                self.st.head_seen_dead, self.st.head_down_at = False, 0.0
                self.host.stop(self.cfg.own_unit)
                self.host.start(self.cfg.own_unit)
                self._phase(VLLM_STARTED)
            elif d.action == DONE:
                self._served(ob)
                self.say(d, force=True)
                self.record(d)
                return 0
            elif d.action == GIVE_UP:
                self.st.gave_up = True
                self.st.peers_overdue = "did not answer within" in d.reason and self.cfg.role == "head"
                self.say(d, force=True)
                self.record(d)
                return 1
            self.say(d)
            self.record(d)
            if d.action in (WAIT, DEFER):
                self.host.sleep(max(d.wait_s, 0.1))
            elif self.cfg.role == "worker" and d.action == START_OWN:
                self.host.sleep(self.cfg.poll_s)

    def _watch_head(self, ob: Observation) -> None:
        """A worker's boot run: note a dead engine at the head, then its API closing."""
        if ob.api_open and ob.health == DEAD:
            self.st.head_seen_dead, self.st.head_down_at = True, 0.0
        elif self.st.head_seen_dead and not ob.api_open and not self.st.head_down_at:
            self.st.head_down_at = ob.now

    def _served(self, ob: Observation) -> None:
        if ob.health == 200:
            self.st.attempts, self.st.last_failure, self.st.next_attempt_at = 0, "", 0.0
            self.st.dead_streak, self.st.probe_next_at, self.st.probe_interval_s = 0, 0.0, 0.0
        self._phase(IDLE)

    def _check_step(self, ob: Observation, d: Decision) -> int:
        st, cfg = self.st, self.cfg
        st.dead_streak = st.dead_streak + 1 if ob.health == DEAD and ob.active(cfg.vllm_unit) else 0
        if ob.health == 200 or ob.peers_down:
            # A peer seen down: the next look at Ray comes as soon as it answers.
            st.probe_next_at, st.probe_interval_s = 0.0, 0.0
        if ob.nodes_missing is not None:
            # Ray was asked: ask again later, less often while nothing changes.
            st.probe_interval_s = min(max(st.probe_interval_s * 2, cfg.check_interval_s), cfg.probe_max_interval_s)
            st.probe_next_at = ob.now + st.probe_interval_s
        if d.action == RECORD_NODES:
            nodes = self.host.ray_nodes(cfg)
            if nodes and all(ip in nodes for ip in cfg.peers_all):
                st.engine_invocation, st.engine_nodes = ob.vllm_invocation, {ip: nodes[ip] for ip in cfg.peers_all}
                d = Decision(DONE, f"the engine serves; recorded its {len(nodes)} Ray node(s)")
            else:
                d = Decision(DONE, "the engine serves; Ray did not list every node: recording next time")
            self._served(ob)
        elif d.action in (RESTART, RECOVER):
            self.say(d, force=True)
            self.record(d)
            if d.action == RESTART:
                # The whole group, in order: vLLM, then Ray; the workers' Ray nodes
                # follow the head's (their check), and the boot procedure takes it from here.
                self.host.stop(cfg.vllm_unit)
                self.host.stop(cfg.ray_unit)
            boot = Recovery(self.host, cfg, "boot")
            boot.st = st
            return boot.run()
        elif d.action == START_OWN:
            st.attempts += 1
            self.host.start(cfg.own_unit)
            self._phase(VLLM_STARTED)
        elif d.action == FAIL_ATTEMPT:
            self._fail(d.reason)
        elif d.action == DONE and ob.health == 200:
            self._served(ob)
        elif d.action == GIVE_UP:
            st.gave_up = True
        quiet = d.action == DONE and d.reason == self.st.last_reason
        if not quiet:
            self.say(d, force=True)
        self.record(d)
        return 1 if d.action == GIVE_UP else 0


def summary(text) -> dict | None:
    """What diagnose reports of a state file's text: None when there is none, else
    {attempts, last_action, last_reason, at, gave_up} (an unreadable file says so)."""
    if text is None:
        return None
    try:
        raw = json.loads(text)
    except (TypeError, ValueError, RecursionError):
        raw = None
    if not isinstance(raw, dict):
        return {"attempts": None, "last_action": "unreadable", "last_reason": "the state file is not JSON",
                "at": None, "gave_up": None}
    def pick(key, kind):
        value = raw.get(key)
        return value if isinstance(value, kind) and not isinstance(value, bool) or kind is bool and \
            isinstance(value, bool) else None
    return {"attempts": pick("attempts", int), "last_action": pick("last_action", str),
            "last_reason": (pick("last_reason", str) or "")[:500], "at": pick("at", (int, float)),
            "gave_up": pick("gave_up", bool)}


def load_config(text: str) -> Config:
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"recover.json is not JSON: {exc}") from None
    return parse_config(raw)


class HostIO(Host):
    """The real host: systemctl, sockets, urllib, the engine's venv for Ray."""

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def boot_id(self) -> str:
        return (self.read("/proc/sys/kernel/random/boot_id") or "").strip()

    def read(self, path: str) -> str | None:
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read(1 << 20)
        except (OSError, UnicodeDecodeError):
            return None

    def write(self, path: str, text: str) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def unit_state(self, unit: str) -> tuple:
        out = subprocess.run(["systemctl", "show", "-p", "ActiveState", "-p", "InvocationID", "--", unit],
                             capture_output=True, text=True, check=False, timeout=30).stdout
        values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        return values.get("ActiveState", "unknown"), values.get("InvocationID", "")

    def start(self, unit: str) -> None:
        # --no-block: a vLLM start takes minutes (TimeoutStartSec=infinity); the loop watches it.
        subprocess.run(["systemctl", "start", "--no-block", "--", unit], check=False, timeout=60)

    def stop(self, unit: str) -> None:
        subprocess.run(["systemctl", "stop", "--", unit], check=False, timeout=600)

    def answers(self, address: str, port: int) -> bool:
        """The host is up: a connection, or a refusal (its kernel answered)."""
        try:
            with socket.create_connection((address, port), timeout=2):
                return True
        except ConnectionRefusedError:
            return True
        except OSError:
            return False

    def listens(self, address: str, port: int) -> bool:
        try:
            with socket.create_connection((address, port), timeout=2):
                return True
        except OSError:
            return False

    def health(self, url: str) -> int | None:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - the role's own URL
                return resp.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except (OSError, ValueError):
            return None

    def ray_nodes(self, cfg: Config) -> dict | None:
        address = f"{cfg.head_address}:{cfg.ray_port}"
        cmd = ["timeout", "60", cfg.python, "-c", PROBE, address]
        if cfg.user:
            cmd = ["runuser", "-u", cfg.user, "--"] + cmd
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=90,
                                  env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
            cluster = parse_probe_output(proc.stdout)
        except (OSError, subprocess.SubprocessError, RayProbeError):
            return None
        return {n.node_ip: n.node_id for n in cluster.alive}

    def log(self, line: str) -> None:
        print(line, flush=True)

    def lock(self, wait: bool) -> bool:
        import fcntl

        os.makedirs("/run/vllm-fleet", exist_ok=True)
        # Held until the process exits (kept open on purpose).
        self._lock = open("/run/vllm-fleet/recover.lock", "w")  # noqa: SIM115
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            return False
        return True


def main(argv, host: Host | None = None, config_path: str = "/etc/vllm-fleet/recover.json") -> int:
    """vllm-fleet-recover boot|check [--config PATH]."""
    host = host or HostIO()
    args = list(argv)
    if "--config" in args:
        i = args.index("--config")
        config_path = args[i + 1]
        del args[i:i + 2]
    if len(args) != 1 or args[0] not in MODES:
        host.log("usage: vllm-fleet-recover boot|check [--config PATH]")
        return 2
    text = host.read(config_path)
    if text is None:
        host.log(f"no {config_path}: the role engine_recovery writes it")
        return 2
    try:
        cfg = load_config(text)
    except ConfigError as exc:
        host.log(f"{config_path}: {exc}")
        return 2
    # The boot run waits for a check that is running; a check finding a run under way leaves it be.
    if not host.lock(wait=args[0] == "boot"):
        host.log(f"engine {cfg.engine}: another recovery run is under way; this check leaves it be")
        return 0
    return Recovery(host, cfg, args[0]).run()
