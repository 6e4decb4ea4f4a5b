"""Tests for plugins/module_utils/fleet/diagnosis.py (diagnose) and its filter,
plugins/filter/diagnosis.py (engine_diagnosis).

Table-driven over results shaped like what the modules return: the probe's
keys are library/vllm_prefill_probe.py's RETURN (prefill_probe._result), its
/metrics figures parse_metrics over the real capture in
tests/fixtures/prefill/metrics-idle.txt, the KV pool the field's (the lab's
37 blocks x 128 = 4,736 tokens, 2 sessions of 2,048).
"""
from __future__ import annotations

from pathlib import Path

import pytest
from ansible.module_utils.fleet import diagnosis as d
from ansible.module_utils.prefill.metrics import parse_metrics
from filter_plugins import load_filters

# Loaded before ansible.errors is imported here: load_filters keeps the controller flag as it was.
FILTERS = load_filters("diagnosis")
from ansible.errors import AnsibleFilterError  # noqa: E402

IDLE = parse_metrics((Path(__file__).resolve().parents[3] / "fixtures" / "prefill" / "metrics-idle.txt")
                     .read_text()).as_dict()
KV = {"kv_cache_tokens": 4736, "full_context_sessions": 2}
CONTEXT = 2048
EVIDENCE_KEYS = {"probe", "probe_reason", "ratio", "threshold", "reference", "uptime_s", "health_status",
                 "kv_cache_tokens", "full_context_sessions", "context_tokens", "kv_cache_usage", "running", "waiting",
                 "waiting_for_capacity", "preemptions_in_window", "preemptions_total", "passive_seconds_per_token",
                 "passive_ratio", "window_s", "gpu_throttled"}


def metrics(**kw) -> dict:
    return dict(IDLE, **kw)


def passive(**kw) -> dict:
    out = {"window_s": 5.0, "seconds_per_token": 7e-05, "requests": 3, "tokens": 3000.0, "seconds": 0.21,
           "preemptions": 0.0, "reason": "", "ratio": 1.05, "progress": True}
    out.update(kw)
    return out


def quiet(**kw) -> dict:
    """A quiet engine's probe: two samples, healthy."""
    out = {"changed": False, "verdict": "healthy", "reason": "both probes below 1.120x the baseline",
           "ratio": 1.02, "threshold": 1.12, "noise": 1.04, "reference": 6.6e-05,
           "samples": [{"server_seconds": 0.068, "client_seconds": 0.07, "prompt_tokens": 1024,
                        "seconds_per_token": 6.64e-05}] * 2,
           "health_status": 200, "answered": True, "busy": False, "passive": None,
           "metrics_before": metrics(), "metrics_after": None, "vllm_version": "0.32.0", "prompt_tokens": 1024,
           "uptime_s": 7200.0, "baseline": None}
    out.update(kw)
    return out


def busy(before=None, after=None, **kw) -> dict:
    """A busy engine's probe: nothing sent, the passive reading instead."""
    out = quiet(verdict="inconclusive", reason="busy: requests were running or waiting around the probe",
                ratio=None, samples=[], answered=None, busy=True, noise=None, reference=None,
                metrics_before=metrics(running=2.0, **(before or {})),
                metrics_after=metrics(running=2.0, **(after or {})), passive=passive())
    out.update(kw)
    return out


def down(**kw) -> dict:
    out = {"changed": False, "verdict": "down", "reason": "nothing answers at http://10.0.0.11:8000: "
           "GET http://10.0.0.11:8000/health: [Errno 111] Connection refused", "ratio": None, "threshold": None,
           "samples": [], "health_status": None, "answered": None, "busy": None, "passive": None,
           "metrics_before": None, "metrics_after": None, "vllm_version": None, "prompt_tokens": None,
           "uptime_s": None, "baseline": None}
    out.update(kw)
    return out


FULL = dict(before={"waiting": 1.0, "kv_cache_usage": 0.9}, after={"waiting": 1.0, "kv_cache_usage": 0.9})

# (id, probe, kv, flags, verdict, words in the summary)
CASES = [
    ("down-refused", down(), None, None, "down", "the engine does not answer: nothing answers at"),
    ("down-503", down(health_status=503, reason="/health answered HTTP 503 (503: the engine core died)"),
     KV, None, "down", "/health answered HTTP 503"),
    ("wedged-no-answer", quiet(verdict="inconclusive", answered=False, ratio=None, samples=[], reason=(
        "/health answers 200 but a one-token completion got no answer in 20 s: the engine is wedged")),
     None, None, "wedged", "the engine is wedged"),
    ("wedged-no-progress", busy(passive=passive(progress=False, requests=0, tokens=0.0, ratio=None,
                                                seconds_per_token=None)),
     KV, None, "wedged", "2 request(s) running but no token was computed in 5.0 s"),
    ("preempting", busy(passive=passive(preemptions=3.0)), KV, {"scheduler_reserve_full_isl": False},
     "preempting", "3 preemption(s) in 5.0 s: running sessions are being evicted and recomputed"),
    ("degraded-quiet", quiet(verdict="degraded", ratio=3.0, uptime_s=3 * 86400.0,
                             reason="prefill 3.000x the baseline, at or above 1.120x: a restart cures this"),
     KV, None, "prefill-degraded", "prefill 3.00x its baseline after 3.0 days of uptime"),
    ("degraded-passive", busy(passive=passive(ratio=2.0)), KV, None, "prefill-degraded",
     "under load, prefill 2.00x its baseline per token (passive, over 5.0 s) after 2.0 h of uptime"),
    ("kv-bound", busy(**FULL), KV, None, "kv-bound", "1 request(s) waiting for the KV pool"),
    ("inconclusive-no-baseline", quiet(verdict="inconclusive", ratio=None, threshold=None, samples=[],
                                       reason="no baseline at /var/lib/vllm-fleet/prefill-baseline.json"),
     KV, None, "inconclusive", "the prefill probe could not call it: no baseline at"),
    ("healthy-quiet", quiet(), KV, None, "healthy", "prefill 1.02x its baseline; nothing waits, nothing is preempted"),
    ("healthy-quiet-no-ratio", quiet(ratio=None), KV, None, "healthy", "prefill as recorded"),
    ("healthy-busy", busy(), KV, None, "healthy",
     "busy but progressing: 2 running, 0 waiting, no preemptions; prefill judged passively (1.05x the baseline)"),
    ("healthy-busy-no-reading", busy(passive=passive(ratio=None, seconds_per_token=None,
                                                     reason="no request finished a prefill in the window")),
     KV, None, "healthy", "judged passively (no request finished a prefill in the window)"),
]


# The GPU's own state on the engine's hosts, as gpu_state_info returns it; the throttle is the
# sentence gpu_throttle reads from a real capture (tests/fixtures/gpu-field/nvidia-smi/02_..., SW Power Cap
# Active).
THROTTLE = "GPU 00000000:0B:00.0: SW Power Cap active at 77 C (slowdown at 97 C)"
THROTTLING = {"lab1": {"present": True, "throttled": None, "reason": ""},
              "lab2": {"present": True, "throttled": THROTTLE, "reason": ""}}
NO_NVIDIA = {h: {"present": False, "throttled": None, "reason": "no nvidia-smi on this host"} for h in ("lab1", "lab2")}
GPU_CASES = [
    ("throttled-quiet", CASES[5][1], KV, None, THROTTLING, "throttled",
     "prefill 3.00x its baseline while the GPU throttles: lab2: GPU 00000000:0B:00.0: SW Power Cap active"),
    ("throttled-passive", CASES[6][1], KV, None, THROTTLING, "throttled",
     "prefill 2.00x its baseline while the GPU throttles: lab2:"),
    ("healthy-while-throttling", quiet(), KV, None, THROTTLING, "healthy", "prefill 1.02x its baseline"),
    ("kv-bound-while-throttling", busy(**FULL), KV, None, THROTTLING, "kv-bound", "1 request(s) waiting"),
    ("degraded-no-nvidia", CASES[5][1], KV, None, NO_NVIDIA, "prefill-degraded", "prefill 3.00x its baseline"),
]


@pytest.mark.parametrize("probe, kv, flags, verdict, words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_verdicts(probe, kv, flags, verdict, words):
    v = d.diagnose(probe, kv, flags, CONTEXT, "engine_a")
    assert set(v) == {"engine", "verdict", "summary", "evidence", "advice"}
    assert (v["engine"], v["verdict"]) == ("engine_a", verdict)
    assert words in v["summary"]
    assert set(v["evidence"]) == EVIDENCE_KEYS
    assert v["evidence"]["probe"] == probe["verdict"]
    # Every verdict but healthy says what to do.
    assert bool(v["advice"]) is (verdict != "healthy")
    assert all(isinstance(a, str) and a for a in v["advice"])


def test_every_verdict_is_reached():
    assert {c[4] for c in CASES} | {c[5] for c in GPU_CASES} == set(d.VERDICTS)


@pytest.mark.parametrize("probe, kv, flags, gpu, verdict, words", [c[1:] for c in GPU_CASES],
                         ids=[c[0] for c in GPU_CASES])
def test_gpu_verdicts(probe, kv, flags, gpu, verdict, words):
    v = d.diagnose(probe, kv, flags, CONTEXT, "engine_a", gpu=gpu)
    assert v["verdict"] == verdict, v
    assert words in v["summary"], v["summary"]
    assert set(v["evidence"]) == EVIDENCE_KEYS
    if verdict == "throttled":
        assert v["evidence"]["gpu_throttled"] == "lab2: " + THROTTLE
        assert "not restarted: a restart cools the GPU for a while and cures nothing" in v["advice"][0]
        assert "rolling-restart" not in " ".join(v["advice"])


def test_gpu_brief_keeps_what_the_diagnosis_shows():
    assert d.gpu_brief({"present": True, "throttled": THROTTLE, "reason": "", "gpus": [{}]}) == {
        "present": True, "throttled": THROTTLE, "reason": ""}
    assert d.gpu_brief({"unreachable": True, "msg": "Failed to connect to the host via ssh"}) == {
        "present": None, "throttled": None, "reason": "unreachable: Failed to connect to the host via ssh"}
    assert d.gpu_brief({"failed": True, "msg": "MODULE FAILURE"})["reason"] == "MODULE FAILURE"
    assert d.gpu_brief({"present": True, "throttled": "", "reason": ""})["throttled"] is None
    assert d.gpu_brief(None) == {"present": None, "throttled": None, "reason": "no result"}


@pytest.mark.parametrize("gpu", [None, [], "lab2", {"lab2": "throttled"}, {"lab2": {"throttled": 3}},
                                 {"lab2": {"throttled": ""}}, {3: {"throttled": None}}])
def test_a_gpu_reading_that_is_no_throttle_changes_nothing(gpu):
    probe = CASES[5][1]
    assert d.diagnose(probe, KV, None, CONTEXT, gpu=gpu)["verdict"] == "prefill-degraded"


@pytest.mark.parametrize("verdict, advice", [
    ("down", "ansible-playbook -i inventory/<site> playbooks/engine.yml restarts the whole engine"),
    ("prefill-degraded", "a restart cures this: ansible-playbook -i inventory/<site> playbooks/rolling-restart.yml"
                         " restarts the engines that need it one at a time"),
    ("kv-bound", "expected with --scheduler-reserve-full-isl, not a fault"),
    ("inconclusive", "record a baseline (ansible-playbook -i inventory/<site> playbooks/verify.yml right after a"
                     " start)"),
])
def test_advice(verdict, advice):
    (probe, kv, flags) = next(c[1:4] for c in CASES if c[4] == verdict)
    assert advice in d.diagnose(probe, kv, flags, CONTEXT)["advice"][0]


@pytest.mark.parametrize("verdict, command", [
    ("down", "ansible-playbook -i inventory/lab/hosts.yml playbooks/engine.yml"),
    ("prefill-degraded", "ansible-playbook -i inventory/lab/hosts.yml playbooks/rolling-restart.yml"),
    ("inconclusive", "ansible-playbook -i inventory/lab/hosts.yml playbooks/verify.yml"),
])
def test_the_advice_names_the_inventory_it_is_given(verdict, command):
    (probe, kv, flags) = next(c[1:4] for c in CASES if c[4] == verdict)
    advice = d.diagnose(probe, kv, flags, CONTEXT, "e", "-i inventory/lab/hosts.yml")["advice"][0]
    assert command in advice and "<site>" not in advice


def test_wedged_advice_names_the_restart():
    v = d.diagnose(quiet(verdict="inconclusive", answered=False), inventory_arg="-i inventory/a")
    assert "restart it (ansible-playbook -i inventory/a playbooks/rolling-restart.yml)" in v["advice"][0]


# --- precedence: down > wedged > preempting > prefill-degraded > kv-bound > inconclusive > healthy ---

ORDER = ["down", "wedged", "preempting", "throttled", "prefill-degraded", "kv-bound", "inconclusive", "healthy"]


def everything_from(level: int) -> dict:
    """A probe where the conditions of ORDER[level] and of every verdict after it hold."""
    holds = set(ORDER[level:])
    probe = quiet(verdict="down" if "down" in holds else "inconclusive" if "inconclusive" in holds else "healthy",
                  busy=False, answered=False if "wedged" in holds else True,
                  metrics_before=metrics(waiting=1.0 if "kv-bound" in holds else 0.0, kv_cache_usage=0.95),
                  passive=passive(preemptions=2.0 if "preempting" in holds else 0.0,
                                  ratio=3.0 if "prefill-degraded" in holds else 1.0))
    return probe


@pytest.mark.parametrize("level", range(len(ORDER)), ids=ORDER)
def test_precedence(level):
    gpu = THROTTLING if "throttled" in ORDER[level:] else None
    assert d.diagnose(everything_from(level), KV, {}, CONTEXT, gpu=gpu)["verdict"] == ORDER[level]


def test_precedence_covers_every_verdict():
    assert sorted(ORDER) == sorted(d.VERDICTS)


def test_wedged_by_no_progress_beats_preempting():
    probe = busy(passive=passive(progress=False, preemptions=1.0))
    assert d.diagnose(probe, KV)["verdict"] == "wedged"


@pytest.mark.parametrize("probe", [
    busy(passive=passive(progress=None)),            # the counters were missing: not a sign of a wedge
    busy(passive=passive(progress=False), metrics_before=metrics(running=0.0),
         metrics_after=metrics(running=0.0)),        # nothing runs: an idle engine computes nothing
    quiet(passive=passive(progress=False), metrics_before=metrics(running=2.0)),  # not busy: the probe answered
])
def test_no_progress_is_wedged_only_while_requests_run(probe):
    assert d.diagnose(probe, KV)["verdict"] != "wedged"


# --- preempting names the flag ---------------------------------------------------------

@pytest.mark.parametrize("flags, fix", [
    ({"scheduler_reserve_full_isl": False}, "--no-scheduler-reserve-full-isl is set: remove it"),
    ({"scheduler_reserve_full_isl": False, "watermark": 0.15}, "--no-scheduler-reserve-full-isl is set"),
    ({"scheduler_reserve_full_isl": True, "watermark": 0.15},
     "--watermark 0.15 is set: remove it, and keep --scheduler-reserve-full-isl on"),
    ({"watermark": 0.01}, "--watermark 0.01 is set"),
    ({"scheduler_reserve_full_isl": True}, "--scheduler-reserve-full-isl is on and no --watermark is set: running "
                                           "sessions outgrew the pool while decoding"),
    ({"watermark": 0.0}, "no --watermark is set"),
    ({"watermark": None}, "no --watermark is set"),
    ({}, "no --watermark is set"),
    (None, "no --watermark is set"),
    ("not flags", "no --watermark is set"),
])
def test_preempting_names_the_flag(flags, fix):
    v = d.diagnose(busy(passive=passive(preemptions=1.0)), KV, flags, CONTEXT)
    assert v["verdict"] == "preempting"
    assert v["advice"] == [v["advice"][0]] and fix in v["advice"][0]
    assert v["evidence"]["preemptions_in_window"] == 1.0


def test_preemptions_before_the_window_are_not_preempting():
    # A total from long ago, none in the window.
    probe = busy(before={"preemptions": 7.0}, after={"preemptions": 7.0})
    v = d.diagnose(probe, KV)
    assert v["verdict"] == "healthy"
    assert (v["evidence"]["preemptions_total"], v["evidence"]["preemptions_in_window"]) == (7.0, 0.0)


# --- kv-bound ---------------------------------------------------------------------------

def test_kv_bound_evidence():
    probe = busy(before={"waiting": 1.0, "waiting_capacity": 1.0, "kv_cache_usage": 0.9},
                 after={"waiting": 1.0, "waiting_capacity": 1.0, "kv_cache_usage": 0.88})
    v = d.diagnose(probe, KV, {"scheduler_reserve_full_isl": True}, CONTEXT, "engine_lab")
    assert v["verdict"] == "kv-bound"
    assert v["summary"] == ("1 request(s) waiting for the KV pool: 4,736 tokens hold 2 full-context session(s) of "
                            "2,048 tokens, 90% in use, 2 running, 0 preemptions")
    e = v["evidence"]
    assert (e["kv_cache_tokens"], e["full_context_sessions"], e["context_tokens"]) == (4736, 2, 2048)
    assert (e["kv_cache_usage"], e["waiting"], e["waiting_for_capacity"], e["running"]) == (0.9, 1.0, 1.0, 2.0)
    assert (e["preemptions_in_window"], e["health_status"]) == (0.0, 200)


@pytest.mark.parametrize("kv, context, usage, waiting, verdict", [
    (KV, CONTEXT, 0.6, 1.0, "kv-bound"),     # 1,894 tokens free < 2,048
    (KV, CONTEXT, 0.5, 1.0, "healthy"),      # 2,368 free: one more session fits, so something else holds it
    (KV, CONTEXT, 0.99, 0.0, "healthy"),     # full but nobody waits
    ({}, None, 0.95, 1.0, "kv-bound"),       # no pool figure: usage alone, at 90 % or more
    ({}, None, 0.85, 1.0, "healthy"),
    ({"kv_cache_tokens": 0}, CONTEXT, 0.95, 1.0, "kv-bound"),
    (KV, None, 0.92, 1.0, "kv-bound"),       # no context: usage alone
    (KV, None, 0.5, 1.0, "healthy"),
])
def test_pool_full(kv, context, usage, waiting, verdict):
    probe = busy(before={"waiting": waiting, "kv_cache_usage": usage})
    assert d.diagnose(probe, kv, None, context)["verdict"] == verdict


def test_usage_and_waiting_take_the_larger_scrape():
    probe = busy(before={"waiting": 0.0, "kv_cache_usage": 0.1}, after={"waiting": 2.0, "kv_cache_usage": 0.95})
    v = d.diagnose(probe, KV, None, CONTEXT)
    assert v["verdict"] == "kv-bound"
    assert (v["evidence"]["waiting"], v["evidence"]["kv_cache_usage"]) == (2.0, 0.95)


# --- prefill-degraded under load -----------------------------------------------------------

@pytest.mark.parametrize("threshold, ratio, verdict", [
    (1.12, 1.12 * d.PASSIVE_MARGIN, "prefill-degraded"),
    (1.12, 1.12 * d.PASSIVE_MARGIN * 0.999, "healthy"),   # batching inflates it: above the threshold is not enough
    (1.12, 1.5, "healthy"),
    (1.2, 1.2 * d.PASSIVE_MARGIN, "prefill-degraded"),
    (1.2, 1.75, "healthy"),
    (2.0, 3.0, "prefill-degraded"),
    (2.0, 2.9, "healthy"),
    (None, 10.0, "healthy"),                              # no threshold: no baseline applied
])
def test_passive_degraded_only_at_threshold_times_margin(threshold, ratio, verdict):
    v = d.diagnose(busy(threshold=threshold, passive=passive(ratio=ratio)), KV, None, CONTEXT)
    assert v["verdict"] == verdict
    assert v["evidence"]["passive_ratio"] == ratio


@pytest.mark.parametrize("uptime, words", [
    (None, "after unknown time of uptime"),
    (0, "after 0 min of uptime"),
    (3599, "after 59 min of uptime"),
    (3600, "after 1.0 h of uptime"),
    (86400 * 2 - 1, "after 48.0 h of uptime"),
    (86400 * 2, "after 2.0 days of uptime"),
])
def test_degraded_says_the_uptime(uptime, words):
    v = d.diagnose(quiet(verdict="degraded", ratio=1.5, uptime_s=uptime))
    assert v["summary"] == "prefill 1.50x its baseline " + words
    assert v["evidence"]["uptime_s"] == uptime


# --- inputs --------------------------------------------------------------------------------

@pytest.mark.parametrize("probe", [None, [], "healthy", 5, {}, {"skipped": True, "changed": False}])
def test_diagnose_rejects_what_is_not_a_probe(probe):
    with pytest.raises(d.DiagnosisError, match=r"probe must be what vllm_prefill_probe returned \(a dict with a "
                                               r"verdict\)"):
        d.diagnose(probe)


@pytest.mark.parametrize("kv, flags", [(None, None), ("x", 3), ([], []), ({"kv_cache_tokens": "many"}, {})])
def test_kv_and_flags_may_be_missing_or_odd(kv, flags):
    v = d.diagnose(quiet(), kv, flags, CONTEXT)
    assert v["verdict"] == "healthy"
    assert v["evidence"]["kv_cache_tokens"] is None


def test_booleans_are_not_numbers():
    v = d.diagnose(busy(passive=passive(preemptions=True)), {"kv_cache_tokens": True}, None, True)
    assert v["verdict"] == "healthy"
    assert (v["evidence"]["preemptions_in_window"], v["evidence"]["kv_cache_tokens"],
            v["evidence"]["context_tokens"]) == (None, None, None)


def test_the_probe_is_not_changed():
    probe = busy(**FULL)
    copy = {k: (dict(v) if isinstance(v, dict) else v) for k, v in probe.items()}
    d.diagnose(probe, KV, {}, CONTEXT)
    assert probe == copy


# --- the filter ----------------------------------------------------------------------------

def test_filter_is_registered():
    assert set(FILTERS) == {"engine_diagnosis", "recovery_summary", "gpu_state_brief"}


def test_filter_is_diagnose():
    probe = busy(**FULL)
    assert FILTERS["engine_diagnosis"](probe, KV, {}, CONTEXT, "engine_a") == d.diagnose(probe, KV, {}, CONTEXT,
                                                                                         "engine_a")
    assert FILTERS["engine_diagnosis"](quiet())["engine"] == ""


@pytest.mark.parametrize("probe", [None, {}, {"skipped": True, "changed": False}, "healthy", ["verdict"], 5, 0.5])
def test_filter_rejects_bad_input(probe):
    with pytest.raises(AnsibleFilterError, match="probe must be what vllm_prefill_probe returned"):
        FILTERS["engine_diagnosis"](probe, KV, {}, CONTEXT)
