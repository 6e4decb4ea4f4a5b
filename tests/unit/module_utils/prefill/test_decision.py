"""Tests for plugins/module_utils/prefill/decision.py.

The baseline's checks, table-driven; the statistics against hand-computed
values and seeded synthetic healthy groups. (parse_metrics: test_metrics.py.)
"""
from __future__ import annotations

import pytest
from ansible.module_utils.prefill import decision as p
from prefill_fake import healthy_groups

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
