"""plugins/module_utils/recovery/: what the power-cut recovery does,
read as an operator would ask it: after which power cut does it start what,
in which order, and when does it keep its hands off.

decide() is table-driven here; test_recovery_properties.py holds the
promises over any input. The loop (Recovery) runs against FakeHost, a host
whose units, peers, Ray nodes and /health follow a scripted engine, with a
clock that only moves when the recovery sleeps or waits."""
from __future__ import annotations

import json

import pytest
from ansible.module_utils.recovery import decide as act
from ansible.module_utils.recovery.config import (
    RAY_STARTED,
    VLLM_STARTED,
    Config,
    ConfigError,
    State,
    parse_config,
    summary,
)
from ansible.module_utils.recovery.decide import Observation, backoff, decide
from ansible.module_utils.recovery.host_io import main
from ansible.module_utils.recovery.loop import Host, Recovery

HEAD, WORKER = "10.0.0.11", "10.0.0.12"
BASE = dict(engine="engine_a", backend="ray", vllm_unit="vllm.service", ray_unit="ray.service",
            head_address=HEAD, ray_port=6379, master_port=29555, health_url="http://192.0.2.11:8000/health",
            api_address="192.0.2.11", api_port=8000, python="/opt/vllm/bin/python", user="vllm",
            max_attempts=3, backoff_s=30, backoff_max_s=600, peer_wait_s=900, join_timeout_s=180,
            ready_timeout_s=900, worker_wait_s=3600, poll_s=5, progress_s=30)


def cfg(role="head", **over) -> Config:
    raw = dict(BASE, role=role, peers=[WORKER] if role == "head" else [])
    raw.update(over)
    return parse_config(raw)


def ob(**kw) -> Observation:
    kw.setdefault("now", 1000.0)
    return Observation(**kw)


UP = {"vllm.service": "active", "ray.service": "active"}
RAY_ONLY = {"vllm.service": "inactive", "ray.service": "active"}
DOWN = {"vllm.service": "inactive", "ray.service": "inactive"}


# ---- decide(): the table -----------------------------------------------------------------------
# (case, role, mode, state fields, observation fields, action, words in the reason)
CASES = [
    # Nothing acts without the marker, whatever else holds.
    ("no marker", "head", "boot", {}, dict(wanted=False, units=DOWN), act.DONE, "not wanted"),
    ("no marker, worker check", "worker", "check", {}, dict(wanted=False, units=DOWN, rendezvous_open=True),
     act.DONE, "not wanted"),
    # A playbook's lease: the boot run waits, the check does nothing.
    ("lease at boot", "head", "boot", {}, dict(units=DOWN, lease_until=2000.0, lease_holder="site.yml"),
     act.DEFER, "site.yml"),
    ("lease in a check", "head", "check", {"dead_streak": 5}, dict(units=UP, health=503, lease_until=1001.0),
     act.DONE, "lease"),
    ("an expired lease is no lease", "head", "boot", {}, dict(units=DOWN, lease_until=999.0), act.START_RAY,
     "attempt 1 of 3"),
    # Head at boot.
    ("head waits for its peers", "head", "boot", {"waiting_since": 900.0}, dict(units=DOWN, peers_down=(WORKER,)),
     act.WAIT, "100 s of 900 s"),
    ("head stops waiting, says why", "head", "boot", {"waiting_since": 100.0},
     dict(units=DOWN, peers_down=(WORKER,)), act.GIVE_UP, "no partial group serves"),
    ("head starts Ray first", "head", "boot", {}, dict(units=DOWN), act.START_RAY, "starting the Ray head"),
    ("mp head starts vLLM", "head", "boot", {}, dict(units=DOWN), act.START_VLLM, "(mp)"),
    ("half-up units are stopped first", "head", "boot", {}, dict(units=RAY_ONLY, health=None), act.FAIL_ATTEMPT,
     "start in order"),
    ("ray head asks Ray", "head", "boot", {"phase": RAY_STARTED, "phase_since": 990.0},
     dict(units=RAY_ONLY), act.PROBE_NODES, "asking Ray"),
    ("ray head waits for the join", "head", "boot", {"phase": RAY_STARTED, "phase_since": 990.0},
     dict(units=RAY_ONLY, nodes_missing=(WORKER,), nodes_new=()), act.WAIT, WORKER),
    ("join times out", "head", "boot", {"phase": RAY_STARTED, "phase_since": 800.0},
     dict(units=RAY_ONLY, nodes_missing=(WORKER,), nodes_new=()), act.FAIL_ATTEMPT, "did not join within 180 s"),
    ("every node joined: vLLM", "head", "boot", {"phase": RAY_STARTED, "phase_since": 990.0},
     dict(units=RAY_ONLY, nodes_missing=(), nodes_new=()), act.START_VLLM, "every node joined"),
    ("Ray head died while joining", "head", "boot", {"phase": RAY_STARTED},
     dict(units=DOWN), act.FAIL_ATTEMPT, "Ray head's unit stopped"),
    ("vLLM loads", "head", "boot", {"phase": VLLM_STARTED, "phase_since": 900.0},
     dict(units=UP, health=None), act.WAIT, "100 s of 900 s"),
    ("vLLM serves", "head", "boot", {"phase": VLLM_STARTED, "phase_since": 900.0, "attempts": 1},
     dict(units=UP, health=200), act.DONE, "serves again"),
    ("vLLM died while starting", "head", "boot", {"phase": VLLM_STARTED, "phase_since": 900.0},
     dict(units=RAY_ONLY), act.FAIL_ATTEMPT, "stopped while starting"),
    ("engine died while starting", "head", "boot", {"phase": VLLM_STARTED, "phase_since": 900.0},
     dict(units=UP, health=503), act.FAIL_ATTEMPT, "/health 503"),
    ("vLLM never ready", "head", "boot", {"phase": VLLM_STARTED, "phase_since": 0.0},
     dict(units=UP, health=None), act.FAIL_ATTEMPT, "no /health 200 within 900 s"),
    ("backing off", "head", "boot", {"attempts": 1, "next_attempt_at": 1020.0, "last_failure": "x"},
     dict(units=DOWN), act.WAIT, "backing off 20 s"),
    ("out of attempts", "head", "boot", {"attempts": 3, "last_failure": "nodes did not join"},
     dict(units=DOWN), act.GIVE_UP, "gave up after 3 attempt(s): nodes did not join"),
    ("already serving at boot (a playbook ran)", "head", "boot", {}, dict(units=UP, health=200), act.DONE,
     "serves"),
    # Worker at boot.
    ("worker waits for the head", "worker", "boot", {"waiting_since": 990.0}, dict(units=DOWN), act.WAIT,
     f"{HEAD}:6379"),
    ("worker joins", "worker", "boot", {}, dict(units=DOWN, rendezvous_open=True), act.START_OWN,
     "starting ray.service"),
    ("mp worker joins at the master port", "worker", "boot", {}, dict(units=DOWN, rendezvous_open=True),
     act.START_OWN, "29555"),
    ("worker stays until the head serves", "worker", "boot", {"phase": VLLM_STARTED},
     dict(units=RAY_ONLY, rendezvous_open=True), act.WAIT, "waiting for the head to serve"),
    ("worker's unit died, the head's vLLM up: a failed attempt", "worker", "boot", {"phase": VLLM_STARTED},
     dict(units=DOWN, rendezvous_open=True, api_open=True), act.FAIL_ATTEMPT, "ray.service stopped"),
    ("worker's unit died, the head gone: a failed attempt", "worker", "boot", {"phase": VLLM_STARTED},
     dict(units=DOWN), act.FAIL_ATTEMPT, "ray.service stopped"),
    ("worker's node dropped by the head's Ray restart: joins again at once", "worker", "boot",
     {"phase": VLLM_STARTED, "attempts": 1}, dict(units=DOWN, rendezvous_open=True), act.START_OWN,
     "attempt 2 of 3, starting ray.service again"),
    ("the same in a check", "worker", "check", {"phase": VLLM_STARTED, "attempts": 1},
     dict(units=DOWN, rendezvous_open=True), act.START_OWN, "the head waits for its nodes"),
    ("the head restarts its dead engine: rejoin its new Ray", "worker", "boot",
     {"phase": VLLM_STARTED, "attempts": 1, "head_seen_dead": True, "head_down_at": 990.0},
     dict(units=RAY_ONLY, rendezvous_open=True), act.REJOIN, "attempt 2 of 3, restarting ray.service"),
    ("not in the same poll as its API closed: the old Ray may still run", "worker", "boot",
     {"phase": VLLM_STARTED, "attempts": 1, "head_seen_dead": True, "head_down_at": 998.0},
     dict(units=RAY_ONLY, rendezvous_open=True), act.WAIT, "waiting for its new Ray head"),
    ("nor before its Ray answers", "worker", "boot",
     {"phase": VLLM_STARTED, "attempts": 1, "head_seen_dead": True, "head_down_at": 900.0},
     dict(units=RAY_ONLY), act.WAIT, "waiting for its new Ray head"),
    ("no rejoin past the attempts", "worker", "boot",
     {"phase": VLLM_STARTED, "attempts": 3, "head_seen_dead": True, "head_down_at": 900.0},
     dict(units=RAY_ONLY, rendezvous_open=True), act.WAIT, "ray.service runs; waiting for the head to serve"),
    ("no rejoin past the attempts", "worker", "boot", {"phase": VLLM_STARTED, "attempts": 3},
     dict(units=DOWN, rendezvous_open=True), act.FAIL_ATTEMPT, "ray.service stopped"),
    ("worker done once the head serves", "worker", "boot", {"phase": VLLM_STARTED},
     dict(units=RAY_ONLY, health=200), act.DONE, "serves"),
    ("worker gives up after its wait", "worker", "boot", {"waiting_since": -3000.0}, dict(units=DOWN),
     act.GIVE_UP, "did not serve within 3600 s"),
    # Worker's check: only while the head holds its join barrier.
    ("worker check: the head waits for its nodes", "worker", "check", {},
     dict(units=DOWN, rendezvous_open=True, api_open=False), act.START_OWN, "the head waits for its nodes"),
    ("worker check: lab kill -9, the head's vLLM runs (503)", "worker", "check", {},
     dict(units=DOWN, rendezvous_open=True, api_open=True, health=503), act.DONE, "not a recovery"),
    ("worker check: head down", "worker", "check", {}, dict(units=DOWN), act.DONE, "nothing to join"),
    ("worker check: its unit runs", "worker", "check", {}, dict(units=RAY_ONLY), act.DONE, "runs"),
    # Head's check.
    ("head check: serving, record the nodes once", "head", "check", {},
     dict(units=UP, health=200, vllm_invocation="inv1"), act.RECORD_NODES, "recording"),
    ("head check: serving, recorded", "head", "check", {"engine_invocation": "inv1"},
     dict(units=UP, health=200, vllm_invocation="inv1"), act.DONE, "serves"),
    ("head check: wedged (200) is not its business", "head", "check", {"engine_invocation": "inv1"},
     dict(units=UP, health=200, vllm_invocation="inv1"), act.DONE, "serves"),
    ("head check: loading", "head", "check", {}, dict(units=UP, health=None), act.DONE, "not a dead engine"),
    ("head check: one 503", "head", "check", {}, dict(units=UP, health=503), act.DONE, "checking again"),
    ("head check: 503 twice, a peer down", "head", "check", {"dead_streak": 1},
     dict(units=UP, health=503, peers_down=(WORKER,)), act.DONE, "waiting for their hosts to boot"),
    ("head check: 503 twice, ask Ray", "head", "check", {"dead_streak": 1},
     dict(units=UP, health=503), act.PROBE_NODES, "asking Ray"),
    ("head check: 503, Ray asked recently", "head", "check", {"dead_streak": 4, "probe_next_at": 1100.0},
     dict(units=UP, health=503), act.DONE, "next look at Ray in 100 s"),
    ("head check: lab kill -9 of the worker's ray.service (node gone)", "head", "check",
     {"dead_streak": 1, "engine_invocation": "inv1", "engine_nodes": {HEAD: "h", WORKER: "w"}},
     dict(units=UP, health=503, vllm_invocation="inv1", nodes_missing=(WORKER,), nodes_new=()), act.DONE,
     "not joined"),
    ("head check: lab kill -9 of RayWorkerProc (same nodes)", "head", "check",
     {"dead_streak": 1, "engine_invocation": "inv1", "engine_nodes": {HEAD: "h", WORKER: "w"}},
     dict(units=UP, health=503, vllm_invocation="inv1", nodes_missing=(), nodes_new=()), act.DONE,
     "no host booted"),
    ("head check: never recorded", "head", "check", {"dead_streak": 1},
     dict(units=UP, health=503, vllm_invocation="inv1", nodes_missing=(), nodes_new=()), act.DONE,
     "never recorded"),
    ("head check: a worker rebooted and rejoined", "head", "check",
     {"dead_streak": 1, "engine_invocation": "inv1", "engine_nodes": {HEAD: "h", WORKER: "w"}},
     dict(units=UP, health=503, vllm_invocation="inv1", nodes_missing=(), nodes_new=(WORKER,)), act.RESTART,
     "rejoined after vLLM started"),
    ("head check: mp cannot tell", "head", "check", {"dead_streak": 1}, dict(units=UP, health=503), act.DONE,
     "under mp"),
    ("head check: vLLM stopped by hand", "head", "check", {}, dict(units=RAY_ONLY), act.DONE, "nothing to do"),
    ("head check: the boot run stopped waiting, peers back", "head", "check", {"peers_overdue": True},
     dict(units=DOWN), act.RECOVER, "taking this boot's recovery up again"),
    ("head check: the boot run stopped waiting, peers still away", "head", "check", {"peers_overdue": True},
     dict(units=DOWN, peers_down=(WORKER,)), act.DONE, "still waiting"),
]


@pytest.mark.parametrize("case,role,mode,state,seen,action,words", CASES, ids=[c[0] for c in CASES])
def test_decide(case, role, mode, state, seen, action, words):
    backend = "mp" if "mp" in case.replace(":", " ").split() else "ray"  # a case names the mp backend
    c = cfg(role, backend=backend)
    d = decide(c, State(**state), ob(**seen), mode)
    assert (d.action, words in d.reason) == (action, True), d


def test_backoff_doubles_and_is_capped():
    c = cfg()
    assert [backoff(c, n) for n in range(7)] == [0, 30, 60, 120, 240, 480, 600]


# ---- recover.json ------------------------------------------------------------------------------
@pytest.mark.parametrize("change,message", [
    ({"role": "boss"}, "role must be one of head, worker"),
    ({"backend": "nccl"}, "backend must be one of ray, mp"),
    ({"ray_port": "6379"}, "ray_port must be an integer"),
    ({"ray_port": True}, "ray_port must be an integer"),
    ({"poll_s": -1}, "poll_s must be a number of seconds"),
    ({"max_attempts": 0}, "max_attempts must be 1 or more"),
    ({"peers": "10.0.0.12"}, "peers must be a list"),
    ({"surprise": 1}, "unknown keys: surprise"),
])
def test_a_bad_config_says_what_is_wrong(change, message):
    with pytest.raises(ConfigError, match=message):
        parse_config({**BASE, "role": "head", **change})


def test_a_config_without_its_engine_says_which_keys():
    with pytest.raises(ConfigError, match="lacks engine, role"):
        parse_config({"backend": "ray"})


# ---- the loop, on a scripted engine ------------------------------------------------------------
class FakeHost(Host):
    """One engine host. ``world`` is shared between a head and a worker FakeHost."""

    def __init__(self, world: dict, name: str):
        self.w, self.name, self.files, self.lines = world, name, {}, []
        self.files["/var/lib/vllm-fleet/engine-wanted"] = "wanted\n"

    def now(self):
        return self.w["t"]

    def sleep(self, seconds):
        self.w["t"] += seconds
        self.w["tick"](self.w)

    def boot_id(self):
        return self.w["boots"][self.name]

    def read(self, path):
        return self.files.get(path)

    def write(self, path, text):
        self.files[path] = text

    def exists(self, path):
        return path in self.files

    def unit_state(self, unit):
        return self.w["units"][self.name].get(unit, "inactive"), self.w.get("inv", "") if unit == "vllm.service" else ""

    def start(self, unit):
        self.w["log"].append((round(self.w["t"]), self.name, "start", unit))
        self.w["on_start"](self.w, self.name, unit)

    def stop(self, unit):
        self.w["log"].append((round(self.w["t"]), self.name, "stop", unit))
        self.w["units"][self.name][unit] = "inactive"
        if self.name == "head" and unit == "vllm.service":
            self.w["health"] = None

    def answers(self, address, port):
        return self.w["up"][address]

    def listens(self, address, port):
        unit = "vllm.service" if port == 8000 else "ray.service"
        return self.w["up"][HEAD] and self.w["units"]["head"].get(unit) == "active"

    def health(self, url):
        return self.w["health"]

    def ray_nodes(self, c):
        self.w["probes"] += 1
        return {ip: nid for ip, nid in self.w["nodes"].items()}

    def log(self, line):
        self.lines.append(line)

    def lock(self, wait):
        return True


def engine_world(**over) -> dict:
    """A TP2 Ray engine: starting ray.service on the head makes its node; on the worker, its node joins
    after 10 s; vLLM answers 200 60 s after its start when both nodes are there, else dies (503)."""
    w = dict(t=1000.0, units={"head": {}, "worker": {}}, up={HEAD: True, WORKER: True}, health=None, nodes={},
             log=[], probes=0, boots={"head": "b1", "worker": "b1"}, pending=[], inv="", n=0)

    def on_start(w, name, unit):
        w["units"][name][unit] = "active"
        w["n"] += 1
        if unit == "ray.service":
            ip = HEAD if name == "head" else WORKER
            w["pending"].append((w["t"] + (0 if name == "head" else 10), lambda w, ip=ip, n=w["n"]:
                                 w["nodes"].__setitem__(ip, f"{ip}-{n}")))
        if unit == "vllm.service":
            w["inv"] = f"inv{w['n']}"
            w["pending"].append((w["t"] + 60, lambda w: w.__setitem__(
                "health", 200 if len(w["nodes"]) == 2 and w["units"]["head"].get("vllm.service") == "active"
                else 503)))

    def tick(w):
        due = [p for p in w["pending"] if p[0] <= w["t"]]
        w["pending"] = [p for p in w["pending"] if p[0] > w["t"]]
        for _, fn in due:
            fn(w)

    w.update(on_start=on_start, tick=tick)
    w.update(over)
    return w


def run(host, role, mode, **over):
    c = cfg(role, **over)
    return Recovery(host, c, mode).run()


def test_both_hosts_back_the_head_waits_for_its_peer_then_starts_ray_vllm_in_order():
    w = engine_world(up={HEAD: True, WORKER: False})
    head, worker = FakeHost(w, "head"), FakeHost(w, "worker")

    def tick(w, inner=w["tick"]):
        inner(w)
        if w["t"] >= 1040 and not w["up"][WORKER]:  # the worker's host boots, its recovery joins
            w["up"][WORKER] = True
            w["pending"].append((w["t"] + 5, lambda w: worker.start("ray.service")))
    w["tick"] = tick
    assert run(head, "head", "boot") == 0
    starts = [(who, unit) for _, who, what, unit in w["log"] if what == "start"]
    assert starts == [("head", "ray.service"), ("worker", "ray.service"), ("head", "vllm.service")]
    state = json.loads(head.files["/var/lib/vllm-fleet/recover-state.json"])
    assert (state["last_action"], state["attempts"]) == ("done", 0)
    assert any("waiting for peer(s) 10.0.0.12" in line for line in head.lines)
    # No vLLM start before every node joined.
    vllm_at = next(t for t, who, what, unit in w["log"] if unit == "vllm.service")
    assert vllm_at >= next(t for t, who, what, unit in w["log"] if who == "worker") + 10


def test_a_worker_that_never_joins_costs_three_bounded_attempts_then_a_reason():
    w = engine_world()
    head = FakeHost(w, "head")
    assert run(head, "head", "boot") == 1
    starts = [unit for _, who, what, unit in w["log"] if what == "start"]
    assert starts == ["ray.service"] * 3  # never vLLM: no partial group
    state = json.loads(head.files["/var/lib/vllm-fleet/recover-state.json"])
    assert state["gave_up"] and state["attempts"] == 3
    assert "did not join within 180 s" in state["last_reason"]
    # Every failed attempt stopped what it started, and the waits grew.
    stops = [t for t, who, what, unit in w["log"] if what == "stop" and unit == "ray.service"]
    starts_t = [t for t, who, what, unit in w["log"] if what == "start"]
    assert len(stops) == 3 and starts_t[2] - stops[1] > starts_t[1] - stops[0]
    assert any(line.startswith("engine engine_a: give-up: gave up after 3") for line in head.lines)


def test_the_head_stops_waiting_for_a_peer_that_never_answers_and_its_check_takes_it_up_later():
    w = engine_world(up={HEAD: True, WORKER: False})
    head = FakeHost(w, "head")
    assert run(head, "head", "boot") == 1
    assert not [x for x in w["log"] if x[2] == "start"]
    state = json.loads(head.files["/var/lib/vllm-fleet/recover-state.json"])
    assert state["peers_overdue"] and "no partial group serves" in state["last_reason"]
    # Still away: the check does nothing.
    assert run(head, "head", "check") == 0 and not w["log"]
    # Back, and its Ray node joins once the head's Ray runs (the worker's own boot run).
    w["up"][WORKER] = True
    w["on_start"] = lambda w, n, u, inner=w["on_start"]: (inner(w, n, u), n == "head" and u == "ray.service"
                                                          and inner(w, "worker", "ray.service"))
    assert run(head, "head", "check") == 0
    assert [u for _, who, what, u in w["log"] if what == "start" and who == "head"] == ["ray.service", "vllm.service"]
    assert w["health"] == 200


def served_engine(w, head):
    """The engine as a playbook leaves it, recorded by one check."""
    for name, unit in (("head", "ray.service"), ("worker", "ray.service"), ("head", "vllm.service")):
        w["on_start"](w, name, unit)
    w["t"] += 61
    w["tick"](w)
    assert w["health"] == 200
    w["log"].clear()
    assert run(head, "head", "check") == 0
    assert json.loads(head.files["/var/lib/vllm-fleet/recover-state.json"])["engine_nodes"] == w["nodes"]


def test_the_worker_alone_the_head_restarts_the_whole_engine_once_its_node_is_back():
    w = engine_world()
    head, worker = FakeHost(w, "head"), FakeHost(w, "worker")
    served_engine(w, head)
    # Power cut of the worker: its node goes, the engine dies (503; vLLM's API stays up).
    w["up"][WORKER], w["health"] = False, 503
    del w["nodes"][WORKER]
    w["units"]["worker"] = {}
    probes_before = w["probes"]
    for _ in range(4):
        assert run(head, "head", "check") == 0
        w["t"] += 30
    assert not w["log"] and w["probes"] == probes_before  # a peer that does not answer is not asked of Ray
    # Power back: the worker's boot run starts its Ray (the head's Ray answers), its node rejoins anew.
    w["up"][WORKER] = True
    w["boots"]["worker"] = "b2"
    worker_cfg = cfg("worker", worker_wait_s=5)
    assert Recovery(worker, worker_cfg, "boot").run() == 1  # it stays only 5 s here
    w["t"] += 11
    w["tick"](w)
    assert WORKER in w["nodes"]
    # The head's check: 503 again, Ray asked, the worker's node is new: the whole engine restarts.
    w["on_start"] = lambda w, n, u, inner=w["on_start"]: (inner(w, n, u), n == "head" and u == "ray.service"
                                                          and inner(w, "worker", "ray.service"))
    w["log"].clear()
    assert run(head, "head", "check") == 0
    assert [(what, u) for _, who, what, u in w["log"] if who == "head"] == [
        ("stop", "vllm.service"), ("stop", "ray.service"), ("start", "ray.service"), ("start", "vllm.service")]
    assert w["health"] == 200
    assert any("rejoined after vLLM started" in line for line in head.lines)


@pytest.mark.parametrize("nodes_after", ["same", "gone"], ids=["RayWorkerProc killed", "ray.service killed"])
def test_the_labs_broken_engines_are_left_alone_and_ray_is_asked_ever_less_often(nodes_after):
    """lab.sh fault kill-ray-worker (the node stays, 503) and a dead ray.service on the worker: the
    test suite leaves these for the next test; the recovery never restarts them."""
    w = engine_world()
    head = FakeHost(w, "head")
    served_engine(w, head)
    w["health"] = 503
    if nodes_after == "gone":
        del w["nodes"][WORKER]
        w["units"]["worker"]["ray.service"] = "failed"
    w["log"].clear()
    probes_before = w["probes"]
    for _ in range(120):  # an hour of checks
        assert run(head, "head", "check") == 0
        w["t"] += 30
    assert not w["log"]
    assert w["probes"] - probes_before <= 12
    worker = FakeHost(w, "worker")
    assert run(worker, "worker", "check") == 0 and not w["log"]


def test_a_wedged_engine_is_left_alone():
    w = engine_world()
    head = FakeHost(w, "head")
    served_engine(w, head)
    for _ in range(10):
        run(head, "head", "check")
        w["t"] += 30
    assert not w["log"]


def test_the_head_alone_back_its_worker_joins_through_its_check():
    """The head's power cut: the worker's Ray node died with the head's GCS. The head's boot run starts its
    Ray and waits; the worker's check sees the head's Ray answer and its vLLM not run, and joins."""
    w = engine_world()
    head, worker = FakeHost(w, "head"), FakeHost(w, "worker")
    served_engine(w, head)
    w["units"] = {"head": {}, "worker": {"ray.service": "inactive"}}
    w["nodes"], w["health"], w["boots"]["head"] = {}, None, "b2"
    w["log"].clear()

    def tick(w, inner=w["tick"]):
        inner(w)
        if w["t"] % 30 < 5:  # the worker's timer
            Recovery(worker, cfg("worker"), "check").run()
    w["tick"] = tick
    assert run(head, "head", "boot") == 0
    assert [(who, u) for _, who, what, u in w["log"] if what == "start"] == [
        ("head", "ray.service"), ("worker", "ray.service"), ("head", "vllm.service")]
    assert w["health"] == 200


def _cut(w, *names):
    """A power cut of these hosts: their units gone, their Ray nodes gone (the head's takes every node
    with its GCS), the engine dead (503 while the head's API lives, nothing when the head is cut)."""
    for name in names:
        w["units"][name] = {}
        w["boots"][name] = w["boots"][name] + "+"
    if "head" in names:
        w["nodes"], w["health"] = {}, None
        w["units"]["worker"] = {}
    else:
        w["nodes"].pop(WORKER, None)
        w["health"] = 503 if w["units"]["head"].get("vllm.service") == "active" else None


def test_power_cuts_in_a_row_each_recover_with_no_playbook_between():
    """The field's second night: both hosts, then the worker alone right after the engine served
    again, then the head alone, then both again; no playbook run between. Each cut recovers by
    itself: the boot run that brings the engine back records its Ray nodes as it serves, so the
    worker's cut right after it reads as a booted host (a new node), not as an engine whose nodes
    were never recorded."""
    w = engine_world()
    head, worker = FakeHost(w, "head"), FakeHost(w, "worker")
    served_engine(w, head)

    def tick(w, inner=w["tick"]):
        inner(w)
        if w["t"] % 30 < 5 and w["up"][WORKER]:  # the worker's check timer joins a head that waits
            Recovery(worker, cfg("worker"), "check").run()
    w["tick"] = tick

    # 1. Both hosts: back together, the head's boot run brings the engine back.
    _cut(w, "head", "worker")
    w["log"].clear()
    assert run(head, "head", "boot") == 0 and w["health"] == 200
    state = json.loads(head.files["/var/lib/vllm-fleet/recover-state.json"])
    assert state["engine_nodes"] == w["nodes"] and state["engine_invocation"] == w["inv"], state

    # 2. Right after, before any check ran: the worker alone. The head's checks wait for its host.
    _cut(w, "worker")
    w["up"][WORKER] = False
    for _ in range(3):
        assert run(head, "head", "check") == 0
        w["t"] += 30
    assert not [x for x in w["log"] if x[0] >= w["t"] - 90]
    # Its host boots: its boot run starts its Ray, whose node joins anew; the head's next check
    # restarts the whole engine.
    w["up"][WORKER] = True
    assert Recovery(worker, cfg("worker", worker_wait_s=5), "boot").run() == 1  # it stays only 5 s here
    w["t"] += 11
    w["tick"](w)
    assert WORKER in w["nodes"]
    w["log"].clear()
    assert run(head, "head", "check") == 0
    assert [(what, u) for _, who, what, u in w["log"] if who == "head"] == [
        ("stop", "vllm.service"), ("stop", "ray.service"), ("start", "ray.service"), ("start", "vllm.service")]
    assert w["health"] == 200
    assert not [line for line in head.lines if "never recorded" in line], head.lines

    # 3. The head alone: its boot run, and the worker's check joins its new Ray.
    _cut(w, "head")
    w["log"].clear()
    assert run(head, "head", "boot") == 0 and w["health"] == 200

    # 4. Both again.
    _cut(w, "head", "worker")
    w["log"].clear()
    assert run(head, "head", "boot") == 0 and w["health"] == 200
    state = json.loads(head.files["/var/lib/vllm-fleet/recover-state.json"])
    assert state["engine_nodes"] == w["nodes"], state


def test_a_lease_keeps_every_run_from_starting_anything():
    w = engine_world()
    head, worker = FakeHost(w, "head"), FakeHost(w, "worker")
    for host in (head, worker):
        host.files["/run/vllm-fleet/lease.json"] = json.dumps({"holder": "playbooks/rolling-restart.yml",
                                                               "expires_at": 10_000})
    assert run(head, "head", "check") == 0 and run(worker, "worker", "check") == 0
    assert not w["log"]

    def tick(w, inner=w["tick"]):
        inner(w)
        if w["t"] >= 120:  # the playbook ends: it brought the engine up and gave the lease back
            head.files.pop("/run/vllm-fleet/lease.json", None)
            w["units"]["head"] = dict(UP)
            w["health"] = 200
    w["tick"] = tick
    assert run(head, "head", "boot") == 0
    assert not w["log"]
    assert any("playbooks/rolling-restart.yml" in line for line in head.lines)


def test_not_wanted_means_nothing_starts():
    w = engine_world()
    head = FakeHost(w, "head")
    del head.files["/var/lib/vllm-fleet/engine-wanted"]
    assert run(head, "head", "boot") == 0 and not w["log"]
    assert "not wanted" in head.lines[-1]


def test_a_new_boot_starts_with_a_fresh_budget_and_keeps_the_node_record():
    old = State(boot_id="b1", attempts=3, gave_up=True, engine_invocation="i", engine_nodes={HEAD: "h"})
    new = State.from_json(old.to_json(), "b2")
    assert (new.attempts, new.gave_up, new.engine_nodes) == (0, False, {HEAD: "h"})
    assert State.from_json(old.to_json(), "b1").attempts == 3
    assert State.from_json("{not json", "b2") == State(boot_id="b2")


def test_the_journal_gets_a_wait_line_every_30_s_not_every_poll():
    w = engine_world(up={HEAD: True, WORKER: False})
    head = FakeHost(w, "head")
    run(head, "head", "boot", peer_wait_s=300)
    waits = [line for line in head.lines if "waiting for peer" in line]
    assert 9 <= len(waits) <= 12


def test_main_reads_its_config_and_refuses_a_bad_one():
    w = engine_world()
    host = FakeHost(w, "head")
    host.files["/etc/vllm-fleet/recover.json"] = json.dumps(dict(BASE, role="head", peers=[WORKER]))
    del host.files["/var/lib/vllm-fleet/engine-wanted"]
    assert main(["boot"], host) == 0
    assert main(["sideways"], host) == 2 and "usage" in host.lines[-1]
    host.files["/etc/vllm-fleet/recover.json"] = "{}"
    assert main(["check"], host) == 2 and "lacks engine" in host.lines[-1]


@pytest.mark.parametrize("text,expected", [
    (None, None),
    ("garbage", {"attempts": None, "last_action": "unreadable", "last_reason": "the state file is not JSON",
                 "at": None, "gave_up": None}),
    (State(attempts=2, last_action="give-up", last_reason="r", at=5.0, gave_up=True).to_json(),
     {"attempts": 2, "last_action": "give-up", "last_reason": "r", "at": 5.0, "gave_up": True}),
])
def test_summary_for_diagnose(text, expected):
    assert summary(text) == expected
