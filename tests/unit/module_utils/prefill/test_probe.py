"""Tests for plugins/module_utils/prefill/probe.py: probe() and record() driving
an EngineClient against the fake vLLM 0.32 server of tests/prefill_fake.py.

Each verdict from what the engine really does (a slow-down after a baseline at
1x, busy, hung, dead, another baseline), the two stages counted in
completions, the warm-up, and what a busy probe never sends.
"""
from __future__ import annotations

import datetime
import time

import pytest
from ansible.module_utils.fleet import diagnosis
from ansible.module_utils.prefill import client as pc
from ansible.module_utils.prefill.decision import FLOOR, GROUP_SIZE, PASSIVE_PREFILLS, SAMPLE_TRIES, Baseline
from ansible.module_utils.prefill.probe import Keep, keep_baseline, keep_known_good, probe, record
from prefill_fake import MODEL, PER_TOKEN, VERSION, FakeVllm, closed_port

TOKENS = 32
WINDOW = 0.05
RESULT_KEYS = {"verdict", "reason", "ratio", "threshold", "samples", "health_status", "answered", "busy", "passive",
               "metrics_before", "metrics_after", "vllm_version", "prompt_tokens", "timed", "passive_judged"}
PASSIVE_KEYS = {"window_s", "seconds_per_token", "requests", "tokens", "seconds", "preemptions", "reason", "ratio",
                "progress"}


def baseline(**kw) -> Baseline:
    """What record() takes from a healthy fake: every sample PER_TOKEN."""
    args = dict(vllm_version=VERSION, model=MODEL, prompt_tokens=TOKENS,
                recorded_at=datetime.datetime.now(datetime.UTC).isoformat(),
                groups=((PER_TOKEN,) * GROUP_SIZE,) * 2)
    args.update(kw)
    return Baseline(**args)


@pytest.fixture
def fake():
    # The probe's metric families only, parsed six times faster; the two tests that
    # start with "full" take the whole capture end to end.
    with FakeVllm(trim=True) as server:
        yield server


@pytest.fixture
def full():
    with FakeVllm() as server, pc.EngineClient(server.url, timeout=2.0) as c:
        yield server, c


def run(client, base=None, **kw):
    return probe(client, MODEL, TOKENS, base if base is not None else baseline(), **dict({"window": WINDOW}, **kw))


# --- healthy and degraded -------------------------------------------------------------

def test_healthy(full):
    fake, client = full
    r = run(client)
    assert set(r) == RESULT_KEYS | {"noise", "reference"}
    assert r["verdict"] == "healthy"
    assert r["ratio"] == pytest.approx(1.0)
    assert r["threshold"] == FLOOR
    assert r["reference"] == pytest.approx(PER_TOKEN)
    assert r["noise"] == pytest.approx(1.0)
    assert (r["health_status"], r["answered"], r["busy"], r["passive"], r["metrics_after"]) == (
        200, True, False, None, None)
    assert (r["vllm_version"], r["prompt_tokens"]) == (VERSION, TOKENS)
    assert r["metrics_before"]["prompt_tokens"] == 636762.0
    assert [s["seconds_per_token"] for s in r["samples"]] == pytest.approx([PER_TOKEN] * 2)
    assert len(fake.completions) == 1 + 2


def test_degraded_after_a_baseline_at_1x(full):
    fake, client = full
    recorded, _ = record(client, MODEL, TOKENS)
    fake.scale = 3.0
    r = probe(client, MODEL, TOKENS, recorded, window=WINDOW)
    assert r["verdict"] == "degraded"
    assert r["ratio"] == pytest.approx(3.0)
    assert "a restart cures this" in r["reason"]
    assert len(r["samples"]) == 4
    assert len(fake.completions) == (1 + 8) + (1 + 4)
    assert fake.connections == 1


@pytest.mark.parametrize("scales, verdict, samples", [
    # Clearly healthy: two samples are enough.
    ([1.0, 1.0, 1.0], "healthy", 2),
    # The warm-up is discarded, however slow.
    ([9.0, 1.0, 1.0], "healthy", 2),
    # The first two look slow: two more, and the fastest two of four decide.
    ([1.0, 1.5, 1.5, 1.0, 1.0], "healthy", 4),
    ([1.0, 1.0, 1.2, 1.0, 1.0], "healthy", 4),
    ([1.0, 1.5, 1.5, 1.5, 1.5], "degraded", 4),
    ([1.0, 1.5, 1.0, 1.5, 1.5], "degraded", 4),
])
def test_two_stages(fake, client, scales, verdict, samples):
    fake.script = list(scales)
    r = run(client)
    assert (r["verdict"], len(r["samples"])) == (verdict, samples)
    assert len(fake.completions) == 1 + samples


def test_every_completion_is_one_token_with_a_fresh_salt(fake, client):
    fake.scale = 3.0
    run(client)
    bodies = fake.completions
    assert len(bodies) == 5
    assert all(b["max_tokens"] == 1 for b in bodies)
    assert len({b["cache_salt"] for b in bodies}) == 5
    assert len({b["prompt"] for b in bodies}) == 1


def test_one_connection_for_the_whole_probe(fake, client):
    fake.scale = 3.0
    run(client)
    assert len(fake.requests) > 10
    assert fake.connections == 1


def test_site_floor(fake, client):
    fake.scale = 1.3
    assert run(client)["verdict"] == "degraded"
    r = run(client, floor=1.5)
    assert (r["verdict"], r["threshold"]) == ("healthy", 1.5)


# --- busy: nothing is sent -----------------------------------------------------------------

@pytest.mark.parametrize("knob", ["running", "waiting"])
def test_busy_sends_no_completion(fake, client, knob):
    setattr(fake, knob, 1.0)
    started = time.monotonic()
    r = run(client)
    assert time.monotonic() - started >= WINDOW
    assert (r["verdict"], r["busy"], r["answered"]) == ("inconclusive", True, None)
    assert r["reason"].startswith("busy:")
    assert fake.completions == []
    assert fake.paths == ["/health", "/metrics", "/version", "/metrics"]
    assert set(r["passive"]) == PASSIVE_KEYS
    assert r["passive"]["window_s"] == WINDOW
    assert r["metrics_after"][knob] == 1.0
    assert r["samples"] == []
    assert (r["ratio"], r["threshold"]) == (None, FLOOR)


def test_busy_threshold_takes_the_site_floor(fake, client):
    fake.running = 1.0
    assert run(client, floor=1.5)["threshold"] == 1.5


def test_busy_passive_reading(fake, client):
    # Others' requests finish: 1 of 1,000 prompt tokens per scrape, at 2x the baseline's prefill.
    fake.running = 2.0
    fake.per_scrape = (1, 1000, 1000 * PER_TOKEN * 2, 0)
    result = run(client)
    p = result["passive"]
    assert (p["requests"], p["tokens"], p["preemptions"], p["progress"]) == (1, 1000.0, 0.0, True)
    assert p["seconds_per_token"] == pytest.approx(2 * PER_TOKEN)
    assert p["ratio"] == pytest.approx(2.0)
    assert p["reason"] == ""
    # The baseline's reference comes with it: an upgrade compares its new baseline with it.
    assert result["reference"] == pytest.approx(PER_TOKEN)


def test_busy_without_progress(fake, client):
    fake.running = 1.0
    p = run(client)["passive"]
    assert (p["seconds_per_token"], p["ratio"], p["progress"], p["requests"]) == (None, None, False, 0)
    assert "no request finished a prefill in the window" in p["reason"]


def test_busy_window_widens_until_enough_prefills_finished(fake, client):
    # One prefill finishes per scrape: the window widens by WINDOW until PASSIVE_PREFILLS did.
    fake.running = 2.0
    fake.per_scrape = (1, 1000, 1000 * PER_TOKEN * 2, 0)
    p = run(client, window_max=100 * WINDOW)["passive"]
    assert (p["requests"], p["tokens"], p["window_s"]) == (PASSIVE_PREFILLS, PASSIVE_PREFILLS * 1000.0,
                                                          pytest.approx(PASSIVE_PREFILLS * WINDOW))
    assert p["seconds_per_token"] == pytest.approx(2 * PER_TOKEN) and p["ratio"] == pytest.approx(2.0)


def test_busy_window_stops_at_its_longest(fake, client):
    fake.running = 2.0
    fake.per_scrape = (1, 1000, 1000 * PER_TOKEN, 0)
    p = run(client, window_max=2.5 * WINDOW)["passive"]
    # Two whole windows, then the half left: three scrapes after the first, three prefills.
    assert (p["requests"], p["window_s"]) == (3, pytest.approx(2.5 * WINDOW))
    assert p["seconds_per_token"] == pytest.approx(PER_TOKEN)


def test_busy_window_without_progress_stops_after_one_window(fake, client):
    # Requests run and no token is computed: the wedged sign, read at once, not after window_max.
    fake.running = 1.0
    started = time.monotonic()
    p = run(client, window_max=1000 * WINDOW)["passive"]
    assert (p["window_s"], p["progress"], p["requests"]) == (WINDOW, False, 0)
    assert time.monotonic() - started < 100 * WINDOW


def test_busy_preemptions_in_the_window(fake, client):
    fake.running = 2.0
    fake.per_scrape = (0, 0, 0.0, 2)
    assert run(client)["passive"]["preemptions"] == 2.0


def test_busy_without_baseline_has_no_ratio(fake, client):
    fake.running = 2.0
    fake.per_scrape = (1, 1000, 1000 * PER_TOKEN, 0)
    r = probe(client, MODEL, TOKENS, None, window=WINDOW)
    assert r["verdict"] == "inconclusive" and r["passive"]["ratio"] is None and r["threshold"] is None
    assert r["passive"]["seconds_per_token"] == pytest.approx(PER_TOKEN)


def test_busy_under_load_slow_prefill_diagnosed_degraded(fake, client):
    """The passive reading under load reaches diagnose's passive rule: the probe gives it the threshold."""
    fake.running = 2.0
    fake.per_scrape = (1, 1000, 1000 * PER_TOKEN * 3, 0)
    r = run(client)
    assert r["threshold"] == FLOOR
    v = diagnosis.diagnose(r)
    assert v["verdict"] == "prefill-degraded", v["summary"]
    assert "under load, prefill 3.00x its baseline per token" in v["summary"]


def test_busy_under_load_healthy_prefill_diagnosed_healthy(fake, client):
    fake.running = 2.0
    fake.per_scrape = (1, 1000, 1000 * PER_TOKEN * 1.2, 0)
    assert diagnosis.diagnose(run(client))["verdict"] == "healthy"


def test_busy_waiting_for_the_pool_diagnosed_kv_bound(fake, client):
    # The field's pool: two sessions run and decode, a third waits for capacity.
    fake.running, fake.waiting, fake.waiting_capacity, fake.kv_usage = 2.0, 1.0, 1.0, 0.9
    fake.per_scrape = (1, 1000, 1000 * PER_TOKEN, 0)
    r = run(client)
    assert fake.completions == []
    before = r["metrics_before"]
    assert (before["waiting"], before["waiting_capacity"], before["kv_cache_usage"]) == (1.0, 1.0, 0.9)
    v = diagnosis.diagnose(r, {"kv_cache_tokens": 4736, "full_context_sessions": 2}, {}, 2048)
    assert v["verdict"] == "kv-bound"
    assert "4,736 tokens hold 2 full-context session(s) of 2,048 tokens" in v["summary"]


def test_busy_preempting_diagnosed_with_the_flag(fake, client):
    fake.running = 3.0
    fake.per_scrape = (1, 1000, 1000 * PER_TOKEN, 2)
    v = diagnosis.diagnose(run(client), None, {"scheduler_reserve_full_isl": False})
    assert v["verdict"] == "preempting"
    assert "--no-scheduler-reserve-full-isl" in v["advice"][0]


# --- busy, and the engine times each request: the same work, judged ---------------------------
# Issue 39: under other traffic shapes the passive rate misreads a healthy engine. An engine that
# times each request (--enable-per-request-metrics) is sampled under load with the baseline's own
# fixed work, and the passive rate no longer judges it.

def _loaded_traffic(fake, passive_ratio: float) -> None:
    # Others' requests finish with a passive rate of passive_ratio x the baseline: the cached-prefix
    # chat of issue 39 read 3.12-4.39x on a healthy engine.
    fake.running = 3.0
    fake.per_scrape = (1, 100, 100 * PER_TOKEN * passive_ratio, 0)


def test_timed_busy_healthy_engine_read_healthy_whatever_the_passive_rate(fake, client):
    _loaded_traffic(fake, 4.4)
    fake.timed = True
    r = run(client, timed=True)
    assert (r["verdict"], r["busy"], r["timed"], r["passive_judged"]) == ("healthy", True, True, False)
    assert r["ratio"] == pytest.approx(1.0) and r["threshold"] == pytest.approx(FLOOR * 1.25)
    assert "samples timed by the engine" in r["reason"]
    assert [s["timed_by"] for s in r["samples"]] == ["engine", "engine"]
    assert len(fake.completions) == 3  # the warm-up and two samples
    assert r["passive"]["ratio"] == pytest.approx(4.4)  # kept as evidence
    v = diagnosis.diagnose(r)
    assert v["verdict"] == "healthy", v["summary"]
    assert "1.00x its baseline, timed by the engine" in v["summary"]


def test_timed_busy_slow_engine_read_degraded(fake, client):
    _loaded_traffic(fake, 1.0)
    fake.timed, fake.scale = True, 3.0
    r = run(client, timed=True)
    assert (r["verdict"], r["timed"]) == ("degraded", True)
    assert r["ratio"] == pytest.approx(3.0)
    assert len(fake.completions) == 5  # two more once the first two looked slow
    v = diagnosis.diagnose(r)
    assert v["verdict"] == "prefill-degraded"
    assert v["summary"].startswith("under load, timed by the engine, prefill 3.00x its baseline")


def test_timed_busy_load_margin_widens_the_threshold(fake, client):
    # 1.6x: degraded quiet against a 1.5 floor, healthy under load with the default margin (1.875).
    _loaded_traffic(fake, 1.0)
    fake.timed, fake.scale = True, 1.6
    assert run(client, timed=True, floor=1.5)["verdict"] == "healthy"
    assert run(client, timed=True, floor=1.5, load_margin=1.0)["verdict"] == "degraded"


def test_timed_busy_with_requests_waiting_sends_nothing_and_judges_no_passive_rate(fake, client):
    _loaded_traffic(fake, 4.4)
    fake.waiting = 1.0
    fake.timed = True
    r = run(client, timed=True)
    assert fake.completions == []
    assert (r["verdict"], r["timed"], r["passive_judged"]) == ("inconclusive", False, False)
    assert "1 request(s) waiting" in r["reason"]
    v = diagnosis.diagnose(r)
    assert v["verdict"] == "healthy", v["summary"]
    assert "prefill not judged" in v["summary"]


def test_timed_busy_engine_without_the_flag_falls_back_to_the_passive_rate(fake, client):
    # An engine started before vllm_fleet_prefill_timed: its answers carry no timing.
    _loaded_traffic(fake, 3.0)
    r = run(client, timed=True)
    assert (r["verdict"], r["timed"], r["passive_judged"]) == ("inconclusive", False, True)
    assert "without --enable-per-request-metrics" in r["reason"]
    assert len(fake.completions) == 1  # the warm-up told
    assert diagnosis.diagnose(r)["verdict"] == "prefill-degraded"


def test_timed_busy_without_progress_sends_nothing(fake, client):
    fake.running, fake.timed = 1.0, True
    r = run(client, timed=True)
    assert fake.completions == [] and r["verdict"] == "inconclusive"
    assert diagnosis.diagnose(r)["verdict"] == "wedged"


def test_timed_short_requests_the_first_scrape_missed_are_load_too(fake, client, fast_settle):
    # A chat's 4-token turns: nothing runs at the instant of a scrape, yet another prefill finishes
    # beside every warm-up. Untimed that was "warm-up: ... did not move by exactly one request".
    fake.per_scrape = (1, 100, 100 * PER_TOKEN * 4.4, 0)
    fake.timed = True
    r = run(client, timed=True)
    assert (r["verdict"], r["busy"], r["timed"], r["answered"]) == ("healthy", True, True, True)
    assert diagnosis.diagnose(r)["verdict"] == "healthy"
    built_once = fake.paths.count("/tokenize")
    untimed = run(client)
    assert untimed["verdict"] == "inconclusive" and untimed["reason"].startswith("warm-up: ")
    # The loaded samples reuse the prompt the quiet path built: no second /tokenize round.
    assert fake.paths.count("/tokenize") == 2 * built_once


def test_untimed_busy_is_as_before(fake, client):
    _loaded_traffic(fake, 3.0)
    fake.timed = True
    r = run(client)
    assert fake.completions == []
    assert (r["timed"], r["passive_judged"]) == (False, True)


def test_another_request_during_the_probe(fake, client, fast_settle):
    # Quiet at the first scrape; someone's request starts right after the first sample.
    fake.on_completion = lambda f, i: setattr(f, "running", 1.0) if i == 2 else None
    r = run(client)
    assert (r["verdict"], r["busy"]) == ("inconclusive", True)
    assert "another request ran during the probe" in r["reason"]
    assert len(r["samples"]) == 1
    assert r["passive"] is not None and r["metrics_after"]["running"] == 1.0
    assert (r["ratio"], r["threshold"]) == (None, FLOOR)
    assert len(fake.completions) == 3


# --- no usable baseline --------------------------------------------------------------------

def test_no_baseline(fake, client):
    r = probe(client, MODEL, TOKENS, None, window=WINDOW)
    assert (r["verdict"], r["answered"], r["busy"]) == ("inconclusive", True, False)
    assert "no baseline" in r["reason"]
    assert len(fake.completions) == 1  # the warm-up shows the engine answers
    assert r["samples"] == [] and r["ratio"] is None


def test_no_baseline_says_why_it_is_missing(fake, client):
    why = "no baseline at /x.json: it is recorded right after a verified start"
    r = probe(client, MODEL, TOKENS, None, window=WINDOW, missing=why)
    assert (r["verdict"], r["reason"]) == ("inconclusive", why)


def test_why_it_is_missing_never_hides_busy(fake, client):
    fake.running = 1.0
    r = probe(client, MODEL, TOKENS, None, window=WINDOW, missing="no baseline at /x.json")
    assert r["verdict"] == "inconclusive" and r["reason"].startswith("busy:")


def test_a_baseline_present_ignores_why_one_would_be_missing(fake, client):
    r = run(client, missing="no baseline at /x.json")
    assert r["verdict"] == "healthy" and "no baseline" not in r["reason"]


# --- keep_baseline: mode=baseline keeps one recorded since the start ---------------------------

RECORDED = "2026-12-01T03:30:00+00:00"
RECORDED_AT = datetime.datetime.fromisoformat(RECORDED).timestamp()


@pytest.mark.parametrize("started, kw, keep, reason", [
    (RECORDED_AT, {}, True, "baseline from %s was recorded since the engine's start" % RECORDED),
    (RECORDED_AT - 60, {}, True, "baseline from %s was recorded since the engine's start" % RECORDED),
    (RECORDED_AT + 1, {}, False, "stale"),                          # the engine restarted since
    (None, {}, False, "stale"),                                     # no unit: never kept
    (RECORDED_AT, {"refresh": True}, False, "stale"),
    (RECORDED_AT, {"model": "other"}, False, "stale"),
    (RECORDED_AT, {"prompt_tokens": TOKENS * 2}, False, "stale"),
])
def test_keep_baseline(started, kw, keep, reason):
    args = dict(model=MODEL, prompt_tokens=TOKENS, refresh=False)
    args.update(kw)
    assert keep_baseline(baseline(recorded_at=RECORDED), started, **args) == Keep(keep, reason)


def test_keep_baseline_without_one_says_why():
    assert keep_baseline(None, RECORDED_AT, MODEL, TOKENS, missing="no baseline at /x.json") == Keep(
        False, "no baseline at /x.json")
    assert keep_baseline(None, RECORDED_AT, MODEL, TOKENS) == Keep(False, "stale")


@pytest.mark.parametrize("kw, reason", [
    ({"prompt_tokens": 64}, "baseline used 64-token prompts, the probe 32: probe with 64 tokens or record again"),
    ({"model": "other"}, "baseline was recorded with model 'other', the engine serves 'tiny': record a new baseline"),
    ({"vllm_version": "0.31.0"}, "baseline was recorded on vLLM 0.31.0, the engine runs 0.32.0: record a new baseline"),
])
def test_another_baseline(fake, client, kw, reason):
    r = run(client, baseline(**kw))
    assert (r["verdict"], r["reason"]) == ("inconclusive", reason)
    assert fake.completions == []
    # The passive reading stands in, without a ratio to a baseline that does not apply.
    assert r["passive"]["ratio"] is None and r["threshold"] is None


def test_v_prefixed_version_is_the_same(fake, client):
    assert run(client, baseline(vllm_version="v0.32.0"))["verdict"] == "healthy"


# --- down and wedged -----------------------------------------------------------------------

def test_down_refused():
    with pc.EngineClient("http://127.0.0.1:%d" % closed_port()) as c:
        r = run(c)
    assert set(r) == RESULT_KEYS
    assert (r["verdict"], r["health_status"], r["busy"], r["metrics_before"]) == ("down", None, None, None)
    assert r["reason"].startswith("nothing answers at http://127.0.0.1:")


def test_down_503(fake, client):
    fake.health_status = 503
    r = run(client)
    assert (r["verdict"], r["health_status"]) == ("down", 503)
    assert r["reason"] == "/health answered HTTP 503 (503: the engine core died)"
    assert fake.paths == ["/health"]


def test_hung_warm_up_is_answered_false(fake):
    fake.hang_from = 0
    with pc.EngineClient(fake.url, timeout=0.2) as c:
        r = run(c, timeout=0.2)
    assert (r["verdict"], r["answered"], r["health_status"], r["busy"]) == ("inconclusive", False, 200, False)
    assert "a one-token completion got no answer in 0.2 s: the engine is wedged" in r["reason"]
    assert diagnosis.diagnose(r)["verdict"] == "wedged"


def test_hung_sample_is_answered_false(fake):
    fake.hang_from = 2
    with pc.EngineClient(fake.url, timeout=0.2) as c:
        r = run(c, timeout=0.2)
    assert (r["verdict"], r["answered"]) == ("inconclusive", False)
    assert r["reason"].startswith("a probe got no answer while /health answers 200")
    assert len(r["samples"]) == 1


def test_warm_up_that_does_not_move_the_metric(fake, client, fast_settle):
    fake.frozen = True
    r = run(client)
    assert (r["verdict"], r["answered"], r["busy"]) == ("inconclusive", True, False)
    assert r["reason"].startswith("warm-up: the engine's prefill time did not move by exactly one request")
    assert diagnosis.diagnose(r)["verdict"] == "inconclusive"


def test_refused_warm_up_is_not_diagnosed_healthy(fake, client):
    # A wrong --api-key: /health and /metrics answer, the completion is refused.
    fake.api_key = "sk-other"
    r = run(client)
    assert (r["verdict"], r["answered"], r["busy"]) == ("inconclusive", True, False)
    assert r["reason"] == 'warm-up: POST /v1/completions answered HTTP 401: {"error": "Unauthorized"}'
    v = diagnosis.diagnose(r)
    assert v["verdict"] == "inconclusive"
    assert "answered HTTP 401" in v["summary"]


def test_sample_that_does_not_move_the_metric(fake, client, fast_settle):
    fake.on_completion = lambda f, i: setattr(f, "frozen", True)  # the warm-up counted, the rest not
    r = run(client)
    assert (r["verdict"], r["busy"]) == ("inconclusive", True)
    assert r["samples"] == []


# --- record ---------------------------------------------------------------------------------

def test_record(fake, client):
    before = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    recorded, r = record(client, MODEL, TOKENS)
    assert isinstance(recorded, Baseline)
    assert (recorded.vllm_version, recorded.model, recorded.prompt_tokens, recorded.unit) == (
        VERSION, MODEL, TOKENS, "seconds_per_token")
    assert [len(g) for g in recorded.groups] == [GROUP_SIZE, GROUP_SIZE]
    assert [x for g in recorded.groups for x in g] == pytest.approx([PER_TOKEN] * 8)
    assert datetime.datetime.fromisoformat(recorded.recorded_at) >= before
    assert (r["threshold"], r["too_noisy"], r["answered"]) == (FLOOR, False, True)
    assert r["reference"] == pytest.approx(PER_TOKEN) and r["noise"] == pytest.approx(1.0)
    assert r["reason"].startswith("threshold 1.120x")
    assert len(r["samples"]) == 8
    assert len(fake.completions) == 1 + 8
    assert len({b["cache_salt"] for b in fake.completions}) == 9
    assert fake.connections == 1


def test_record_groups_and_floor(fake, client):
    recorded, r = record(client, MODEL, TOKENS, groups=3, floor=1.5)
    assert len(recorded.groups) == 3 and len(r["samples"]) == 12
    assert r["threshold"] == 1.5


def test_record_noisy(fake, client):
    # The second group 1.6x the first: recorded as it is, and said to be too noisy.
    fake.script = [1.0] + [1.0] * 4 + [1.6] * 4
    recorded, r = record(client, MODEL, TOKENS)
    assert recorded is not None
    assert r["too_noisy"] is True and r["reason"].startswith("too noisy")
    assert r["threshold"] > FLOOR


def test_record_busy_sends_nothing(fake, client):
    fake.waiting = 1.0
    recorded, r = record(client, MODEL, TOKENS)
    assert recorded is None
    assert (r["verdict"], r["busy"]) == ("inconclusive", True)
    assert "a baseline must be taken on a quiet engine" in r["reason"]
    assert fake.completions == [] and "/tokenize" not in fake.paths


def test_record_down(fake, client):
    fake.health_status = 503
    recorded, r = record(client, MODEL, TOKENS)
    assert (recorded, r["verdict"], r["health_status"]) == (None, "down", 503)


def test_record_hung(fake):
    fake.hang_from = 3
    with pc.EngineClient(fake.url, timeout=0.2) as c:
        recorded, r = record(c, MODEL, TOKENS, timeout=0.2)
    assert (recorded, r["verdict"], r["answered"]) == (None, "inconclusive", False)


def test_record_contended(fake, client, fast_settle):
    fake.on_completion = lambda f, i: setattr(f, "running", 1.0) if i == 4 else None
    recorded, r = record(client, MODEL, TOKENS)
    assert recorded is None
    assert (r["verdict"], r["busy"]) == ("inconclusive", True)
    assert r["reason"] == "busy: another request ran while the baseline was taken"
    assert len(r["samples"]) == 3


def test_record_a_lone_request_beside_a_sample_spoils_that_sample_only(fake, client, fast_settle):
    """A watcher's one-token canary lands beside the fourth sample: the prefill count moves by
    two, the engine reads quiet again at once, and that sample is taken again."""
    fake.on_completion = lambda f, i: setattr(f, "time_count", f.time_count + 1) if i == 4 else None
    recorded, r = record(client, MODEL, TOKENS)
    assert recorded is not None and len(r["samples"]) == 8
    assert len(fake.completions) == 1 + 8 + 1  # the warm-up, the samples and the one taken again


def test_record_lone_requests_beside_every_try_of_a_sample_are_busy(fake, client, fast_settle):
    fake.on_completion = lambda f, i: setattr(f, "time_count", f.time_count + 1) if i >= 4 else None
    recorded, r = record(client, MODEL, TOKENS)
    assert recorded is None and (r["verdict"], r["busy"]) == ("inconclusive", True)
    assert len(fake.completions) == 4 + SAMPLE_TRIES


def test_record_a_lone_request_beside_the_warm_up_spoils_that_warm_up_only(fake, client, fast_settle):
    """A canary or a session's next turn lands beside the warm-up: the prefill count moves by two,
    the engine reads quiet again at once, and the warm-up is taken again; the baseline records."""
    fake.on_completion = lambda f, i: setattr(f, "time_count", f.time_count + 1) if i == 0 else None
    recorded, r = record(client, MODEL, TOKENS)
    assert recorded is not None and r["answered"] is True, r


def test_record_requests_beside_every_warm_up_is_no_failure(fake, client, fast_settle):
    """A consumer back at once after a start, its requests beside each of the warm-up's tries:
    the baseline is simply not recorded (vllm_verify says why)."""
    fake.on_completion = lambda f, i: setattr(f, "time_count", f.time_count + 1) if i < SAMPLE_TRIES else None
    recorded, r = record(client, MODEL, TOKENS)
    assert recorded is None
    assert (r["verdict"], r["answered"]) == ("inconclusive", True)
    assert r["reason"].startswith("warm-up: the engine's prefill time did not move by exactly one request")


def test_probe_a_lone_request_beside_the_warm_up_is_taken_again(fake, client, fast_settle):
    fake.on_completion = lambda f, i: setattr(f, "time_count", f.time_count + 1) if i == 0 else None
    r = probe(client, MODEL, TOKENS, baseline(), window=WINDOW)
    assert r["verdict"] != "inconclusive" and r["answered"] is True, r


# --- keep_known_good: a start slower than the known-good one keeps it --------------------------

@pytest.mark.parametrize("scale, kw, keep", [
    (1.0, {}, False),
    (1.1, {}, False),                    # under the floor's threshold: the new one is recorded
    (FLOOR * 1.01, {}, True),
    (5.0, {}, True),
    (5.0, {"vllm_version": "0.31.0"}, False),  # an upgrade is not comparable
    (5.0, {"model": "other"}, False),
    (5.0, {"prompt_tokens": TOKENS * 2}, False),
])
def test_keep_known_good(scale, kw, keep):
    known = baseline(recorded_at=RECORDED, **kw)
    new = baseline(groups=((PER_TOKEN * scale,) * GROUP_SIZE,) * 2)
    got = keep_known_good(known, new)
    assert got.keep is keep, got.reason
    if not kw:
        assert got.ratio == pytest.approx(scale)
    if keep:
        assert got.reason.startswith("prefill right after the start is %.2fx the known-good baseline from %s"
                                     % (scale, RECORDED))


def test_keep_known_good_without_a_baseline_before():
    assert keep_known_good(None, baseline()) == Keep(False, "no baseline before")
