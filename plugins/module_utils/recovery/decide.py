"""Every decision of the power-cut recovery: :func:`decide`, what was seen in
(:class:`Observation`), one action and a one-line reason out (:class:`Decision`).
Pure: no clock, no I/O.

Stdlib only: roles/engine_recovery copies this file to each engine host (see
recovery/__init__.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .config import IDLE, RAY_STARTED, Config, State

# What decide() may answer.
DONE, WAIT, DEFER, GIVE_UP = "done", "wait", "defer", "give-up"
START_RAY, START_VLLM, START_OWN, REJOIN = "start-ray", "start-vllm", "start-own", "rejoin"
FAIL_ATTEMPT, PROBE_NODES, RECORD_NODES, RESTART, RECOVER = (
    "fail-attempt", "probe-nodes", "record-nodes", "restart-engine", "recover")
# A health status the head's check restarts on (VLLM_KEEP_ALIVE_ON_ENGINE_DEATH).
DEAD = 503
# How many 503s in a row the check needs.
DEAD_STREAK = 2


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


def _spent_or_backing_off(cfg: Config, st: State, ob: Observation, mode: str,
                          advice: str = "Run site.yml") -> Decision | None:
    """Give up once the attempts are spent (saying ``advice``), or hold off while the backoff
    after the last failed attempt runs: a boot run waits it out, a check looks again next
    time. None: neither, an attempt may start."""
    if st.attempts >= cfg.max_attempts:
        return Decision(GIVE_UP, f"gave up after {st.attempts} attempt(s): {st.last_failure}. {advice}")
    if ob.now < st.next_attempt_at:
        left = st.next_attempt_at - ob.now
        reason = f"backing off {_secs(left)} after attempt {st.attempts} failed: {st.last_failure}"
        return Decision(WAIT, reason, min(cfg.poll_s, left)) if mode == "boot" else Decision(DONE, reason)
    return None


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
        spent = _spent_or_backing_off(cfg, st, ob, "boot", "The engine stays down; fix the cause, then run site.yml")
        if spent:
            return spent
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
    spent = _spent_or_backing_off(cfg, st, ob, "boot")
    if spent:
        return spent
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
    spent = _spent_or_backing_off(cfg, st, ob, "check")
    if spent:
        return spent
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
    spent = _spent_or_backing_off(cfg, st, ob, "check")
    if spent:
        return spent
    return Decision(START_OWN, f"the head waits for its nodes (its {cfg.rendezvous_port} answers, its vLLM does"
                    f" not run): attempt {st.attempts + 1} of {cfg.max_attempts}, starting {unit}")

