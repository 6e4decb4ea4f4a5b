"""Property tests for plugins/module_utils/recovery/decide.py's decide() and loop, over any
state and observation: the promises the power-cut recovery makes (docs/provisioning.md,
"After a power cut")."""
from __future__ import annotations

from ansible.module_utils.recovery.config import IDLE, MODES, RAY_STARTED, VLLM_STARTED, State, parse_config, summary
from ansible.module_utils.recovery.decide import (
    DEFER,
    DONE,
    RECOVER,
    REJOIN,
    RESTART,
    START_OWN,
    START_RAY,
    START_VLLM,
    Observation,
    backoff,
    decide,
)
from hypothesis import given
from hypothesis import strategies as st

HEAD, WORKER = "10.0.0.11", "10.0.0.12"
STARTS = {START_RAY, START_VLLM, START_OWN, REJOIN, RESTART, RECOVER}
UNIT_STATES = st.sampled_from(["active", "activating", "inactive", "failed", "deactivating", "unknown"])


def config(role, backend, max_attempts=3):
    return parse_config(dict(engine="e", role=role, backend=backend, vllm_unit="vllm.service",
                                ray_unit="ray.service", head_address=HEAD, ray_port=6379, master_port=29555,
                                peers=[WORKER] if role == "head" else [], health_url="http://h/health",
                                api_address="h", api_port=8000, max_attempts=max_attempts))


states = st.builds(
    State, attempts=st.integers(0, 10), phase=st.sampled_from([IDLE, RAY_STARTED, VLLM_STARTED]),
    phase_since=st.floats(0, 5000), next_attempt_at=st.floats(0, 5000), waiting_since=st.floats(0, 5000),
    peers_overdue=st.booleans(), dead_streak=st.integers(0, 5), probe_next_at=st.floats(0, 5000),
    head_seen_dead=st.booleans(), head_down_at=st.sampled_from([0.0, 100.0, 4990.0]),
    engine_invocation=st.sampled_from(["", "inv1", "inv2"]),
    engine_nodes=st.sampled_from([{}, {HEAD: "h", WORKER: "w"}]))
nodes = st.one_of(st.none(), st.lists(st.sampled_from([HEAD, WORKER]), unique=True).map(tuple))
observations = st.builds(
    Observation, now=st.floats(0, 5000), wanted=st.booleans(), lease_until=st.floats(0, 6000),
    units=st.fixed_dictionaries({"vllm.service": UNIT_STATES, "ray.service": UNIT_STATES}),
    peers_down=st.lists(st.just(WORKER), max_size=1).map(tuple), rendezvous_open=st.booleans(),
    api_open=st.booleans(), health=st.sampled_from([None, 200, 500, 503]), nodes_missing=nodes,
    nodes_new=nodes, vllm_invocation=st.sampled_from(["", "inv1", "inv2"]))
configs = st.builds(config, st.sampled_from(["head", "worker"]), st.sampled_from(["ray", "mp"]),
                    st.integers(1, 5))


@given(configs, states, observations, st.sampled_from(MODES))
def test_nothing_starts_under_a_lease_or_without_the_marker_and_a_reason_is_always_given(c, s, o, mode):
    d = decide(c, s, o, mode)
    assert d.reason and "\n" not in d.reason
    if o.lease_live or not o.wanted:
        assert d.action in (DONE, DEFER)


@given(configs, states, observations, st.sampled_from(MODES))
def test_no_new_attempt_past_the_bound_nor_before_the_backoff_ends(c, s, o, mode):
    d = decide(c, s, o, mode)
    if (d.action in (START_RAY, START_OWN, REJOIN, RESTART)
            or (d.action == START_VLLM and s.phase == IDLE)):
        assert s.attempts < c.max_attempts
        assert o.now >= s.next_attempt_at


@given(states, observations)
def test_the_head_never_starts_vllm_before_every_node_joined(s, o):
    d = decide(config("head", "ray"), s, o, "boot")
    if d.action == START_VLLM:
        assert s.phase == RAY_STARTED and o.nodes_missing == () and o.active("ray.service")


@given(states, observations)
def test_the_head_starts_nothing_while_a_peer_does_not_answer(s, o):
    for backend in ("ray", "mp"):
        d = decide(config("head", backend), s, o, "boot")
        if o.peers_down and s.phase == IDLE:
            assert d.action not in STARTS


@given(states, observations)
def test_the_heads_check_restarts_only_a_dead_engine_with_a_node_new_since_its_start(s, o):
    d = decide(config("head", "ray"), s, o, "check")
    if d.action == RESTART:
        assert o.health == 503 and s.dead_streak >= 1 and o.nodes_new and o.nodes_missing == ()
        assert s.engine_invocation == o.vllm_invocation


@given(states, observations)
def test_a_workers_check_never_joins_while_the_heads_vllm_runs(s, o):
    d = decide(config("worker", "ray"), s, o, "check")
    if d.action == START_OWN:
        assert o.rendezvous_open and not o.api_open


@given(st.integers(1, 5), st.floats(1, 100), st.floats(100, 10_000))
def test_backoff_grows_and_stays_under_its_cap(n, base, cap):
    c = parse_config(dict(engine="e", role="head", backend="ray", vllm_unit="v", ray_unit="r",
                             head_address=HEAD, ray_port=1, master_port=2, backoff_s=base, backoff_max_s=cap))
    assert backoff(c, n) <= backoff(c, n + 1) <= cap


@given(st.text(max_size=300) | st.binary(max_size=300).map(lambda b: b.decode("latin-1")))
def test_any_state_file_reads_as_a_state_and_any_summary_never_raises(text):
    assert isinstance(State.from_json(text, "b"), State)
    assert summary(text) is None or isinstance(summary(text), dict)


@given(st.dictionaries(st.sampled_from(["schema", "boot_id", "attempts", "phase", "at", "gave_up", "engine_nodes"]),
                       st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5)
                       | st.lists(st.integers(), max_size=2)))
def test_a_state_file_of_the_wrong_types_starts_afresh(raw):
    import json

    state = State.from_json(json.dumps({"schema": 1, **raw}), "b")
    assert isinstance(state.attempts, int) and not isinstance(state.attempts, bool)
    assert isinstance(state.engine_nodes, dict) and isinstance(state.phase, str)
