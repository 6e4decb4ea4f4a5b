"""bench/canary_shapes.py against the fake engine of tests/prefill_fake.py, timed as vLLM's
--enable-per-request-metrics times it: the statistic reads the engine's own time, traffic or not,
and a slowed engine reads slower by as much."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from prefill_fake import MODEL, FakeVllm

BENCH = Path(__file__).resolve().parents[3] / "bench" / "canary_shapes.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("canary_shapes", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_statistic_is_the_probes(bench):
    # decision.statistic: the mean of the fastest half.
    assert bench.statistic([4.0, 1.0, 3.0, 2.0]) == 1.5
    assert bench.statistic([2.0]) == 2.0


def test_shapes_read_the_engines_own_time(bench, tmp_path):
    with FakeVllm() as fake:
        fake.timed = True
        out = tmp_path / "canary.json"
        assert bench.main(["--url", fake.url, "--model", MODEL, "--prompt-tokens", "32", "--interval-s", "0.02",
                           "--phase-s", "0.6", "--shapes", "idle,chat-cached", "--json", str(out)]) == 0
        fake.scale = 3.0
        slow = tmp_path / "slow.json"
        assert bench.main(["--url", fake.url, "--model", MODEL, "--prompt-tokens", "32", "--interval-s", "0.02",
                           "--phase-s", "0.6", "--shapes", "idle", "--json", str(slow)]) == 0
    rows = {r["phase"]: r for r in json.loads(out.read_text())["results"]}
    assert rows["idle"]["samples"] >= 4 and rows["idle"]["errors"] == 0
    assert rows["chat-cached"]["load_ok"] > 0 and rows["chat-cached"]["load_failed"] == 0
    assert rows["chat-cached"]["stat_ratio_max"] == pytest.approx(1.0)
    assert json.loads(slow.read_text())["results"][0]["median_spt"] == pytest.approx(3 * rows["idle"]["median_spt"])


def test_an_engine_without_the_flag_is_said(bench, tmp_path):
    with FakeVllm() as fake:
        out = tmp_path / "canary.json"
        bench.main(["--url", fake.url, "--model", MODEL, "--prompt-tokens", "32", "--interval-s", "0.02",
                    "--phase-s", "0.2", "--shapes", "idle", "--json", str(out)])
    samples = json.loads(out.read_text())["samples"]
    assert samples and all("enable_per_request_metrics" in s["error"] or "--enable-per-request-metrics" in s["error"]
                           for s in samples)
