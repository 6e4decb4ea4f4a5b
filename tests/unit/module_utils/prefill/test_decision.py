"""Tests for plugins/module_utils/prefill/decision.py.

parse_metrics is table-driven over the real vLLM 0.32 /metrics captures in
tests/fixtures/vllm-cpu-0.32 and vllm-cpu-0.32-ray (values read off each
file), and over hostile texts built from their lines. The statistics are
tested against hand-computed values and seeded synthetic healthy groups.
"""
from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path

import pytest
from ansible.module_utils.prefill import decision as p
from prefill_fake import healthy_groups

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


# ---- Baseline -----------------------------------------------------------------

GROUPS = ((0.040, 0.041, 0.043, 0.050), (0.041, 0.040, 0.042, 0.060))


def base(groups=GROUPS, **kw) -> p.Baseline:
    args = dict(vllm_version="0.32.0", model="/srv/models/tiny", prompt_tokens=1000,
                recorded_at="2026-12-01T03:30:00+00:00", groups=groups)
    args.update(kw)
    return p.Baseline(**args)


def test_baseline_json_round_trip():
    b = base()
    assert p.baseline_from_json(p.baseline_to_json(b)) == b
    assert p.baseline_from_json(p.baseline_to_json(b).encode()) == b


BAD_GROUPS = [
    ((GROUPS[0],), "needs 2 to"),
    ((), "needs 2 to"),
    ((GROUPS[0], GROUPS[1][:3]), "exactly 4"),
    ((GROUPS[0], (0.04, 0.04, 0.04, float("nan"))), "finite time"),
    ((GROUPS[0], (0.04, 0.04, 0.04, float("inf"))), "finite time"),
    ((GROUPS[0], (0.04, 0.04, 0.04, -0.04)), "finite time"),
    ((GROUPS[0], (0.04, 0.04, 0.04, 0)), "finite time"),
    ((GROUPS[0], (0.04, 0.04, 0.04, 1e300)), "finite time"),
    ((GROUPS[0], (0.04, 0.04, 0.04, True)), "not a number"),
    ((GROUPS[0], (0.04, 0.04, 0.04, "0.04")), "not a number"),
    ((GROUPS[0], "0.04"), "list of numbers"),
    ((GROUPS[0],) * 65, "needs 2 to"),
]


@pytest.mark.parametrize("groups,match", BAD_GROUPS)
def test_baseline_rejects_groups(groups, match):
    with pytest.raises(p.PrefillError, match=match):
        base(groups=groups)


@pytest.mark.parametrize("kw,match", [
    ({"prompt_tokens": 0}, "prompt_tokens"), ({"prompt_tokens": True}, "prompt_tokens"),
    ({"prompt_tokens": 1000.0}, "prompt_tokens"), ({"model": ""}, "model"),
    ({"recorded_at": "yesterday"}, "ISO 8601"), ({"vllm_version": None}, "vllm_version"),
    ({"unit": "ms"}, "unit"),
])
def test_baseline_rejects_fields(kw, match):
    with pytest.raises(p.PrefillError, match=match):
        base(**kw)


GOOD_JSON = p.baseline_to_json(base())


@pytest.mark.parametrize("body,match", [
    ("", "not JSON"), ("{", "not JSON"), ("[1, 2]", "JSON object"), ("null", "JSON object"),
    (GOOD_JSON.replace('"schema": 1', '"schema": 2'), "schema"),
    (GOOD_JSON.replace("0.043", "NaN"), "finite time"),
    (GOOD_JSON.replace("0.043", "Infinity"), "finite time"),
    (GOOD_JSON.replace("0.043", "1e999"), "finite time"),
    (GOOD_JSON.replace('"model"', '"modell"'), "lacks model"),
    (GOOD_JSON.replace('"unit"', '"extra": 1, "unit"'), "unknown keys extra"),
    ("[" * 100000, "not JSON"),
    (b"\xff\xfe{}".decode("utf-8", errors="replace"), "not JSON"),
])
def test_baseline_from_json_rejects(body, match):
    with pytest.raises(p.PrefillError, match=match):
        p.baseline_from_json(body)


@pytest.mark.parametrize("version,model,tokens,ok,match", [
    ("0.32.0", "/srv/models/tiny", 1000, True, "matches"),
    ("v0.32.0", "/srv/models/tiny", 1000, True, "matches"),
    ("0.32.1", "/srv/models/tiny", 1000, False, "vLLM 0.32.0, the engine runs 0.32.1"),
    ("0.32.0", "tiny", 1000, False, "model"),
    ("0.32.0", "/srv/models/tiny", 999, False, "1000-token"),
])
def test_comparable(version, model, tokens, ok, match):
    got, reason = p.comparable(base(), version, model, tokens)
    assert got is ok and match in reason


# ---- statistic and threshold -----------------------------------------------

@pytest.mark.parametrize("samples,value", [
    ((0.04, 0.05, 0.09, 0.041), 0.0405),  # the 2 fastest of 4
    ((0.05, 0.04), 0.04),                 # 1 of 2
    ((0.06, 0.04, 0.05), 0.045),          # 2 of 3
    ((0.1,), 0.1),
    ((5, 1, 4, 2, 3, 9, 8, 7), 2.5),      # 4 of 8
])
def test_statistic(samples, value):
    assert p.statistic(samples) == pytest.approx(value)


@pytest.mark.parametrize("samples", [(), (float("nan"),), (-1.0, 1.0), (float("inf"), 1.0)])
def test_statistic_rejects(samples):
    with pytest.raises(p.PrefillError):
        p.statistic(samples)


def test_statistic_ignores_one_sided_burst():
    assert p.statistic((0.04, 0.04, 0.04, 4.0)) == p.statistic((0.04, 0.04, 0.04, 0.041))


def test_threshold_quiet_baseline_is_floor():
    th = p.threshold(base(groups=((0.040, 0.040, 0.040, 0.040), (0.040, 0.040, 0.041, 0.041))))
    assert th.value == p.FLOOR and not th.too_noisy
    assert th.reference == pytest.approx(0.04)


def test_threshold_hand_computed():
    # reference = sqrt(0.0405 * 0.0405) = 0.0405; slowest 4 pooled: .043 .05 .06 .042 -> (.042+.043)/2
    th = p.threshold(base())
    assert th.reference == pytest.approx(0.0405)
    assert th.noise == pytest.approx(0.0425 / 0.0405)
    assert th.value == pytest.approx(max(p.FLOOR, th.noise * p.MARGIN))
    assert not th.too_noisy


def test_threshold_too_noisy_lab_like():
    # Run-to-run 35 vs 56 ms (restart.md 6.1).
    th = p.threshold(base(groups=((0.035, 0.036, 0.037, 0.040), (0.056, 0.055, 0.058, 0.060))))
    assert th.too_noisy and th.reason.startswith("too noisy")


# ---- decide ---------------------------------------------------------------------

QUIET = base(groups=((0.040, 0.040, 0.041, 0.042), (0.040, 0.041, 0.041, 0.043)))


@pytest.mark.parametrize("kw,verdict,needs_more,used,match", [
    ({"down": True}, "down", False, 0, "does not answer"),
    ({"busy": True, "first_two": (9.0, 9.0)}, "inconclusive", False, 0, "busy"),
    ({"first_two": (0.041, 0.042)}, "healthy", False, 2, "both probes below"),
    ({"first_two": (0.041, 0.052)}, "inconclusive", True, 2, "send 2 more"),
    ({"first_two": (0.041, 0.052), "more": (0.040, 0.041)}, "healthy", False, 4, "below"),
    ({"first_two": (0.053, 0.052), "more": (0.054, 0.060)}, "degraded", False, 4, "a restart cures"),
    ({"first_two": (0.30, 0.31), "more": (0.30, 0.32)}, "degraded", False, 4, "7."),
    # One burst within the spread limit: the statistic drops it.
    ({"first_two": (0.053, 0.052), "more": (0.054, 0.09)}, "degraded", False, 4, "restart"),
    # Spread over 2x: no degraded call from contended samples (restart.md 6.3)...
    ({"first_two": (0.044, 0.20), "more": (0.060, 0.20)}, "inconclusive", False, 4, "spread"),
    # ...unless even the fastest sample is past the threshold: contention only slows.
    ({"first_two": (0.053, 0.052), "more": (0.054, 0.20)}, "degraded", False, 4, "restart"),
    ({"first_two": (0.053, 0.12), "more": (0.054, 0.20)}, "degraded", False, 4, "restart"),
    ({"first_two": (0.05, 0.05), "version": "0.33.0", "model": "/srv/models/tiny", "prompt_tokens": 1000},
     "inconclusive", False, 0, "record a new baseline"),
])
def test_decide(kw, verdict, needs_more, used, match):
    v = p.decide(QUIET, **kw)
    assert (v.verdict, v.needs_more, v.samples_used) == (verdict, needs_more, used)
    assert match in v.reason
    assert v.verdict in p.VERDICTS


def test_decide_no_baseline():
    v = p.decide(None, (0.04, 0.04))
    assert v.verdict == "inconclusive" and "no baseline" in v.reason


NOISY = base(groups=((0.035, 0.036, 0.037, 0.040), (0.056, 0.055, 0.058, 0.060)))


def test_decide_too_noisy_calls_a_large_slowdown():
    th = p.threshold(NOISY)
    assert th.too_noisy and th.detectable == pytest.approx(th.value * th.noise)
    v = p.decide(NOISY, (0.3, 0.3), (0.3, 0.3))
    assert v.verdict == "degraded" and v.ratio > 5


def test_decide_too_noisy_between_threshold_and_detectable_is_inconclusive():
    th = p.threshold(NOISY)
    x = th.reference * (th.value + th.detectable) / 2
    v = p.decide(NOISY, (x, x), (x, x))
    assert v.verdict == "inconclusive" and "too noisy" in v.reason


def test_decide_too_noisy_healthy_says_so():
    th = p.threshold(NOISY)
    x = th.reference
    v = p.decide(NOISY, (x, x * th.value * 1.01), (x, x))
    assert v.verdict == "healthy" and "too noisy" in v.reason


@pytest.mark.parametrize("too_noisy, detectable", [(False, 1.2), (True, 1.2 * 1.1)])
def test_threshold_detectable(too_noisy, detectable):
    assert p.Threshold(1.2, 1.1, 0.04, too_noisy, "").detectable == pytest.approx(detectable)


def test_threshold_detectable_quiet_is_the_threshold():
    th = p.threshold(QUIET)
    assert not th.too_noisy and th.detectable == th.value


@pytest.mark.parametrize("fastest, spreads, verdict", [
    # Spread over SPREAD_MAX, but even the fastest sample is at or past what the noisy
    # baseline can tell: contention cannot explain the slow-down away.
    (1.0001, (1.0, 1.0, 2.5, 2.5), "degraded"),
    (1.5, (1.0, 1.2, 3.0, 3.0), "degraded"),
    # The fastest below it: the spread blocks the call.
    (0.99, (1.0, 1.2, 2.5, 2.5), "inconclusive"),
])
def test_decide_spread_does_not_block_when_the_fastest_is_detectable(fastest, spreads, verdict):
    th = p.threshold(NOISY)
    assert th.too_noisy
    samples = [th.reference * th.detectable * fastest * k for k in spreads]
    assert max(samples) / min(samples) > p.SPREAD_MAX
    v = p.decide(NOISY, samples[:2], samples[2:])
    assert v.verdict == verdict
    assert v.spread == pytest.approx(max(samples) / min(samples))
    if verdict == "inconclusive":
        assert "spread" in v.reason


def test_decide_spread_quiet_baseline_at_the_threshold():
    th = p.threshold(QUIET)
    x = th.reference * th.value * 1.0001
    assert p.decide(QUIET, (x, x), (x * 2.5, x * 2.5)).verdict == "degraded"
    y = th.reference * th.value * 0.98
    assert p.decide(QUIET, (y, x * 1.1), (x * 2.5, x * 2.5)).verdict == "inconclusive"


def test_site_floor_raises_the_threshold():
    assert p.threshold(QUIET, floor=1.5).value == 1.5
    assert p.decide(QUIET, (0.04 * 1.4, 0.04 * 1.4), (0.04 * 1.4,) * 2).verdict == "degraded"


def test_decide_busy_never_degraded_even_when_slow():
    assert p.decide(QUIET, (1.0, 1.0), (1.0, 1.0), busy=True).verdict == "inconclusive"


@pytest.mark.parametrize("first,more", [
    ((0.04,), None), ((0.04, 0.04, 0.04), None), ((0.04, 0.04), (0.04,)), ((0.04, 0.04), (0.04,) * 3),
    ((0.04, float("nan")), None), ((0.04, -1), None), ((0.04, 1e308), None), ((0.04, None), None),
])
def test_decide_rejects_bad_samples(first, more):
    with pytest.raises(p.PrefillError):
        p.decide(QUIET, first, more)


def test_decide_as_dict_keys():
    assert set(p.decide(QUIET, (0.04, 0.04)).as_dict()) == {
        "verdict", "ratio", "threshold", "reason", "samples_used", "needs_more", "spread"}


def test_detects_mild_slowdown_on_quiet_site():
    """Power on a quiet site: a true 1.3x slow-down is called degraded nearly always."""
    hits = 0
    for i in range(200):
        gs = healthy_groups(i, 3, noise=0.03)
        b = base(groups=gs[:2])
        probe = [x * 1.3 for x in gs[2]]
        v = p.decide(b, probe[:2])
        if v.needs_more:
            v = p.decide(b, probe[:2], probe[2:])
        hits += v.verdict == "degraded"
    assert hits >= 190
