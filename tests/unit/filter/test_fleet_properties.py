"""Property tests for the filters that read operator knobs as numbers
(plugins/filter/fleet.py, gpu_preflight.py) over numbers past range
(tests/hostile.py): every numeric knob of an engine (its ports, shape,
context, probe settings, ranks), the gate's KV pool and context, a host's
port, a vLLM flag, the clock-skew limit and the hosts' clock offsets, set to
5,000 digits, inf, nan, an int past float's range or numeric text.

What each promises: AnsibleFilterError or a problem that names the knob, and
nothing else (int() of 5,000 digits, float() of an int past float's range,
str() and %r of a 4,301-digit int raised before); a record's numbers are
finite and in range, so the record is JSON without NaN or Infinity.
"""
from __future__ import annotations

import json

import pytest
from filter_plugins import load_filters
from hostile import OUT_OF_RANGE, out_of_range
from hypothesis import given
from hypothesis import strategies as st
from test_fleet import (
    LAB,
    LAB_ENGINE_HOSTS,
    _lab,
    engine_rank,
    engine_records,
    gate_upstreams,
    host_problems,
    logic,
    vllm_argv,
)

GPU_PREFLIGHT = load_filters("gpu_preflight")
from ansible.errors import AnsibleFilterError  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")

# Each numeric knob of an engine and the record's field that holds it.
KNOBS = {
    "vllm_server_port": "port", "ray_cluster_port": "ray_port", "vllm_server_master_port": "master_port",
    "vllm_server_tensor_parallel_size": "tensor_parallel_size",
    "vllm_server_pipeline_parallel_size": "pipeline_parallel_size", "vllm_fleet_gpus_per_host": "gpus_per_host",
    "vllm_fleet_context_tokens": "context_tokens", "vllm_fleet_probe_prompt_tokens": "probe_prompt_tokens",
    "vllm_fleet_prefill_threshold_floor": "prefill_threshold_floor",
}
IDS = [str(i) for i in range(len(OUT_OF_RANGE))]
PEERS = [{"name": "spark1", "rank": 0, "address": "10.0.0.1"}, {"name": "spark2", "rank": 1, "address": "10.0.0.2"}]


def assert_record(record: dict, knob: str) -> None:
    json.dumps(record, allow_nan=False)
    value = record[KNOBS[knob]]
    # The floor is carried as read (finite: json.dumps above) and refused out of 1 to 10.
    if value is None or (isinstance(value, float) and not 1.0 <= value <= 10.0):
        assert any(knob in p for p in record["problems"]), record["problems"]
    if isinstance(value, int):
        assert 0 < value <= logic.MAX_INTEGER
    for problem in record["problems"]:
        assert len(problem) < 1000


def records_or_error(hostvars):
    try:
        return engine_records(LAB_ENGINE_HOSTS, hostvars)
    except AnsibleFilterError:
        return None


@given(st.sampled_from(sorted(KNOBS)), out_of_range(), st.booleans())
def test_a_knob_past_range_is_a_problem_never_an_exception(knob, value, on_both):
    """On both hosts, the knob's own problem; on one, the hosts disagree too."""
    hostvars = _lab(lab1={knob: value}, lab2={knob: value} if on_both else {})
    (record,) = engine_records(LAB_ENGINE_HOSTS, hostvars)
    assert_record(record, knob)


@pytest.mark.parametrize("value", OUT_OF_RANGE, ids=IDS)
@pytest.mark.parametrize("knob", sorted(KNOBS))
def test_each_knob_past_range(knob, value):
    (record,) = engine_records(LAB_ENGINE_HOSTS, _lab(lab1={knob: value}, lab2={knob: value}))
    assert_record(record, knob)


@given(out_of_range())
def test_a_rank_past_range_raises_only_the_filter_error(rank):
    """int() of a 5,000-digit rank raised ValueError out of engine_peers."""
    records = records_or_error(_lab(lab2={"vllm_fleet_rank": rank}))
    if records is not None:
        json.dumps(records, allow_nan=False)
    assert engine_rank(rank) is None or 0 <= engine_rank(rank) <= logic.MAX_INTEGER


@given(out_of_range(), out_of_range())
def test_gate_upstreams_raise_only_the_filter_error(tokens, context):
    (record,) = engine_records(LAB_ENGINE_HOSTS, LAB)
    for pairs, overrides in (([(record, {"kv_cache_tokens": tokens, "concurrency_tokens": context})], None),
                             ([(record, {"kv_cache_tokens": 1000})], {"engine_lab": tokens}),
                             ([(dict(record, context_tokens=context), {"kv_cache_tokens": 1000})], None)):
        try:
            upstreams = gate_upstreams(pairs, overrides)
        except AnsibleFilterError as exc:
            assert len(str(exc)) < 1000
            continue
        json.dumps(upstreams, allow_nan=False)


@given(out_of_range())
def test_host_problems_and_vllm_argv_raise_only_the_filter_error(value):
    problems = host_problems(["lab3"], {"lab3": dict(LAB["lab3"], gate_service_port=value)}, "gate",
                             ["gate_service_port"])
    assert all(len(p) < 1000 for p in problems)
    for flags in ({"max_model_len": value}, {"hf_overrides": {"rope_scaling": {"factor": value}}}):
        try:
            argv = vllm_argv(flags)
        except AnsibleFilterError:
            continue
        assert all(isinstance(word, str) for word in argv)


@given(out_of_range(), out_of_range())
def test_clock_skew_raises_only_the_filter_error(max_skew, offset):
    """float() of an int past float's range raised OverflowError, int() of 'inf' ValueError."""
    hostvars = {"spark1": {"r": {"clock_offset_s": 0.5}}, "spark2": {"r": {"clock_offset_s": offset}}}
    for skew in (max_skew, 2.0):
        try:
            check = GPU_PREFLIGHT["gpu_preflight_clock_skew"](PEERS, hostvars, skew, "engine_a", "r")
        except AnsibleFilterError as exc:
            assert "gpu_preflight_max_clock_skew_s" in str(exc)
            continue
        json.dumps(check, allow_nan=False)


@pytest.mark.parametrize("offset", [10 ** 5000, float("inf"), float("nan"), "1e999", 10 ** 400],
                         ids=["huge", "inf", "nan", "text", "past-float"])
def test_an_offset_past_range_is_no_clock_sample(offset):
    hostvars = {"spark1": {"r": {"clock_offset_s": 0.5}}, "spark2": {"r": {"clock_offset_s": offset}}}
    check = GPU_PREFLIGHT["gpu_preflight_clock_skew"](PEERS, hostvars, 2.0, "engine_a", "r")
    assert (check["ok"], check["detail"]) == (False, "engine engine_a: no clock sample from spark2")


@pytest.mark.parametrize("max_skew", [10 ** 5000, float("inf"), float("nan"), "1e999", -1],
                         ids=["huge", "inf", "nan", "text", "negative"])
def test_a_clock_skew_limit_past_range_is_refused(max_skew):
    with pytest.raises(AnsibleFilterError, match="gpu_preflight_max_clock_skew_s must be a number of seconds"):
        GPU_PREFLIGHT["gpu_preflight_clock_skew"](PEERS, {}, max_skew, "engine_a", "r")


def test_a_knob_of_5000_digits_is_named_with_its_value_cut():
    knob = "vllm_fleet_context_tokens"
    (record,) = engine_records(LAB_ENGINE_HOSTS, _lab(lab1={knob: "9" * 5000}, lab2={knob: 10 ** 5000}))
    assert (f"engine engine_lab: {knob} is a number of more than 30 digits on lab2 but '{'9' * 76}... on the head"
            f" lab1; set it on the engine's group") in record["problems"]
    assert f"engine engine_lab: {knob} must be a positive integer, got '{'9' * 76}..." in record["problems"]
    assert record["context_tokens"] is None
