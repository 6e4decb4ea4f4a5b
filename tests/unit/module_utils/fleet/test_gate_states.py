"""plugins/module_utils/fleet/gate_admin.py: the gate's /admin/state read, what
the playbooks wait on, and the request a wanted state asks for; hostile
bodies raise GateAdminError only, in linear time."""
from __future__ import annotations

import pytest
from ansible.module_utils.fleet.gate_admin import Call, GateAdminError, call_for, facts, read_state
from hostile import assert_linear
from hypothesis import given
from hypothesis import strategies as st


def _body(**over) -> dict:
    body = {
        "state": "ok", "shutting_down": False, "held": False, "hold_remaining_s": 0, "max_hold_s": 600,
        "inflight": 3, "queued": 1, "reserved_tokens": 0,
        "queue": {"depth": 1, "max_depth": 64, "oldest_wait_s": 0.5, "head_tokens": 10, "timeout_s": 600},
        "upstreams": {
            "a": {"ready": True, "drained": False, "state": "ready", "detail": "", "inflight": 0,
                  "reserved_tokens": 0, "kv_cache_tokens": 1000, "max_model_len": 100, "url": "http://a"},
            "b": {"ready": False, "drained": True, "state": "down", "detail": "x", "inflight": 3,
                  "reserved_tokens": 0, "kv_cache_tokens": 1000, "max_model_len": 100, "url": "http://b"},
        },
    }
    body.update(over)
    return body


def test_facts_of_an_upstream_and_of_the_gate():
    state = read_state(_body())
    assert facts(state, "a") == {"idle": True, "ready": True, "held": False, "drained": ["b"], "inflight": 0,
                                 "queued": 1, "queue_timeout_s": 600.0, "max_hold_s": 600.0}
    assert facts(state, "b")["idle"] is False and facts(state, "b")["ready"] is False
    # Without an upstream, idle means nothing in flight or queued anywhere.
    assert facts(state)["idle"] is False and facts(state)["ready"] is None
    assert facts(read_state(_body(inflight=0, queued=0)))["idle"] is True
    assert facts(read_state(_body(inflight=0, queued=2)))["idle"] is False


@pytest.mark.parametrize("wanted, upstream, hold_s, call", [
    ("present", "a", None, None),
    ("drained", "a", None, Call("/admin/drain", {"upstream": "a"})),
    ("drained", "b", None, None),
    ("undrained", "b", None, Call("/admin/undrain", {"upstream": "b"})),
    ("undrained", "a", None, None),
    ("held", None, 90, Call("/admin/hold", {"seconds": 90})),
    ("released", None, None, None),
])
def test_the_call_only_when_needed(wanted, upstream, hold_s, call):
    assert call_for(read_state(_body()), wanted, upstream, hold_s) == call


def test_release_when_held():
    assert call_for(read_state(_body(held=True)), "released") == Call("/admin/release", {})


@pytest.mark.parametrize("wanted, upstream, hold_s, message", [
    ("drained", None, None, "state=drained needs the upstream (the engine's name)"),
    ("drained", "z", None, "the gate has no upstream 'z' (it has: a, b)"),
    ("held", None, None, "state=held needs hold_s, a positive number of seconds, got None"),
    ("held", None, 0, "state=held needs hold_s, a positive number of seconds, got 0"),
    ("held", None, float("nan"), "state=held needs hold_s, a positive number of seconds, got nan"),
    ("held", None, 3601, "a 3601 s hold is past the gate's longest (max_hold_s 600 s): raise "
                         "gate_service_max_hold_s or hold for less"),
    ("held", None, 601, "a 601 s hold is past the gate's longest (max_hold_s 600 s): raise "
                        "gate_service_max_hold_s or hold for less"),
    ("gone", None, None, "state must be one of present, drained, undrained, held, released, got 'gone'"),
])
def test_a_wanted_state_that_cannot_be(wanted, upstream, hold_s, message):
    with pytest.raises(GateAdminError) as err:
        call_for(read_state(_body()), wanted, upstream, hold_s)
    assert str(err.value) == message


@pytest.mark.parametrize("body, message", [
    ([], "the gate's /admin/state is not a JSON object"),
    (_body(queue=None), "the gate's /admin/state has no queue"),
    (_body(upstreams=[]), "the gate's /admin/state has no upstreams"),
    (_body(held="no"), "the gate's /admin/state has no true/false for held (got 'str')"),
    (_body(inflight=-1), "the gate's /admin/state has no count for in-flight requests (got 'int')"),
    (_body(inflight=True), "the gate's /admin/state has no count for in-flight requests (got 'bool')"),
    (_body(max_hold_s=float("nan")), "the gate's /admin/state has no number for the longest hold (got 'float')"),
    (_body(upstreams={"a": 1}), "the gate's /admin/state has no object for upstream 'a'"),
])
def test_a_body_that_is_not_the_gates(body, message):
    with pytest.raises(GateAdminError) as err:
        read_state(body)
    assert str(err.value) == message


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                   max_size=4), max_leaves=30)


@given(st.one_of(_json, st.builds(lambda over: _body(**over), st.dictionaries(
    st.sampled_from(["held", "inflight", "queued", "max_hold_s", "queue", "upstreams"]), _json, max_size=3))))
def test_hostile_bodies_raise_gate_admin_error_only(body):
    try:
        state = read_state(body)
    except GateAdminError:
        return
    for upstream in [None, *state["upstreams"]]:
        facts(state, upstream)
        for wanted in ("drained", "undrained", "held", "released", "present"):
            try:
                call_for(state, wanted, upstream, 60)
            except GateAdminError:
                pass


def test_reading_is_linear_in_the_upstreams():
    def body(n):
        up = _body()["upstreams"]["a"]
        return _body(upstreams={"e%d" % i: up for i in range(n)})

    assert_linear(lambda b: facts(read_state(b)), body, small=4096)
