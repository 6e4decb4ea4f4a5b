"""The power-cut recovery's loop: observe the host, decide, act, record, until
done (:class:`Recovery`), over what it needs of a host (:class:`Host`; the real
one is host_io.HostIO, the tests pass a fake).

Stdlib only: roles/engine_recovery copies this file to each engine host (see
recovery/__init__.py).
"""
from __future__ import annotations

import json

from . import decide as act  # the actions decide() answers: act.DONE, act.START_RAY, ...
from .config import IDLE, RAY_STARTED, VLLM_STARTED, Config, State
from .decide import DEAD, Decision, Observation, backoff, decide


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
        if force or decision.action != act.WAIT or now - self._last_line_at >= self.cfg.progress_s \
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
            if d.action == act.PROBE_NODES:
                probe = True
                continue
            if self.mode == "check":
                return self._check_step(ob, d)
            if d.action == act.DEFER:
                # The playbook owns the units now: whatever this run started is its to converge.
                self._phase(IDLE)
                self.st.waiting_since = self.host.now()
            elif d.action == act.FAIL_ATTEMPT:
                self._fail(d.reason)
            elif d.action == act.START_RAY:
                self.st.attempts += 1
                self.host.start(self.cfg.ray_unit)
                self._phase(RAY_STARTED)
            elif d.action == act.START_VLLM:
                if self.st.phase == IDLE:
                    self.st.attempts += 1
                self.host.start(self.cfg.vllm_unit)
                self._phase(VLLM_STARTED)
            elif d.action == act.START_OWN:
                self.st.attempts += 1
                self.host.start(self.cfg.own_unit)
                self._phase(VLLM_STARTED)
            elif d.action == act.REJOIN:
                self.st.attempts += 1
                self.st.head_seen_dead, self.st.head_down_at = False, 0.0
                self.host.stop(self.cfg.own_unit)
                self.host.start(self.cfg.own_unit)
                self._phase(VLLM_STARTED)
            elif d.action == act.DONE:
                if self.cfg.role == "head" and self.cfg.backend == "ray" and ob.health == 200:
                    # Recorded now, not at the next check: a cut right after this start must
                    # find the nodes this start served with (a new one is a host that booted).
                    d = Decision(act.DONE, f"{d.reason}; {self._record_nodes(ob)}")
                self._served(ob)
                self.say(d, force=True)
                self.record(d)
                return 0
            elif d.action == act.GIVE_UP:
                self.st.gave_up = True
                self.st.peers_overdue = "did not answer within" in d.reason and self.cfg.role == "head"
                self.say(d, force=True)
                self.record(d)
                return 1
            self.say(d)
            self.record(d)
            if d.action in (act.WAIT, act.DEFER):
                self.host.sleep(max(d.wait_s, 0.1))
            elif self.cfg.role == "worker" and d.action == act.START_OWN:
                self.host.sleep(self.cfg.poll_s)

    def _watch_head(self, ob: Observation) -> None:
        """A worker's boot run: note a dead engine at the head, then its API closing."""
        if ob.api_open and ob.health == DEAD:
            self.st.head_seen_dead, self.st.head_down_at = True, 0.0
        elif self.st.head_seen_dead and not ob.api_open and not self.st.head_down_at:
            self.st.head_down_at = ob.now

    def _record_nodes(self, ob: Observation) -> str:
        """Record the Ray nodes the serving engine's start runs on; what was done, for the journal."""
        cfg, st = self.cfg, self.st
        nodes = self.host.ray_nodes(cfg)
        if nodes and all(ip in nodes for ip in cfg.peers_all):
            st.engine_invocation, st.engine_nodes = ob.vllm_invocation, {ip: nodes[ip] for ip in cfg.peers_all}
            return f"recorded its {len(cfg.peers_all)} Ray node(s)"
        return "Ray did not list every node: recording at the next check"

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
        if d.action == act.RECORD_NODES:
            d = Decision(act.DONE, f"the engine serves; {self._record_nodes(ob)}")
            self._served(ob)
        elif d.action in (act.RESTART, act.RECOVER):
            self.say(d, force=True)
            self.record(d)
            if d.action == act.RESTART:
                # The whole group, in order: vLLM, then Ray; the workers' Ray nodes
                # follow the head's (their check), and the boot procedure takes it from here.
                self.host.stop(cfg.vllm_unit)
                self.host.stop(cfg.ray_unit)
            boot = Recovery(self.host, cfg, "boot")
            boot.st = st
            return boot.run()
        elif d.action == act.START_OWN:
            st.attempts += 1
            self.host.start(cfg.own_unit)
            self._phase(VLLM_STARTED)
        elif d.action == act.FAIL_ATTEMPT:
            self._fail(d.reason)
        elif d.action == act.DONE and ob.health == 200:
            self._served(ob)
        elif d.action == act.GIVE_UP:
            st.gave_up = True
        quiet = d.action == act.DONE and d.reason == self.st.last_reason
        if not quiet:
            self.say(d, force=True)
        self.record(d)
        return 1 if d.action == act.GIVE_UP else 0

