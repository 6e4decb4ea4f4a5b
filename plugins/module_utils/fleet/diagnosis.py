# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One engine's stall, explained: a verdict with its evidence and what to do.

Pure: ``diagnose`` takes what ``vllm_prefill_probe`` (mode probe),
``vllm_kv_cache_info`` and ``vllm_flags_info`` returned on the engine's head
and names one of ``VERDICTS``. The first rule that holds wins, in this order:

``down``              nothing answers, or /health is not 200.
``wedged``            /health is 200 but a one-token completion did not come,
                      or requests run and no token was computed in the window.
``preempting``        vllm:num_preemptions_total rose in the window.
``throttled``         a slow-down that would read prefill-degraded, while a GPU
                      of the engine runs a thermal or power throttle
                      (gpu_state_info): a restart cools the GPU for a while and
                      cures nothing, so it is not restarted.
``prefill-degraded``  the probe called it degraded: quiet, or under load with
                      samples the engine timed itself (the same fixed work as
                      the baseline's). An engine that does not time its
                      requests is judged under load by the passive prefill
                      per token, PASSIVE_MARGIN times over the threshold: other
                      traffic shapes inflate that rate (docs/diagnose.md).
``kv-bound``          requests wait and the pool cannot take one more
                      full-context session: the engine queues them, as
                      --scheduler-reserve-full-isl means it to.
``inconclusive``      the probe could not call it (no baseline, too noisy,
                      contention) and nothing above holds.
``healthy``           none of the above.

docs/diagnose.md is the runbook built on these verdicts.

A figure that is no finite number (inf, nan, an int past float's range, text)
is read as no figure: ``diagnose`` raises DiagnosisError and nothing else.
"""

from __future__ import annotations

import typing as t

from ansible.module_utils.fleet.commands import command
from ansible.module_utils.shared.numeric import finite

VERDICTS = ("healthy", "kv-bound", "preempting", "prefill-degraded", "throttled", "wedged", "down", "inconclusive")
PASSIVE_MARGIN = 1.5
# The -i of the commands the advice names: the caller passes its run's
# (vllm_fleet_inventory_arg); without one, a placeholder to fill in.
INVENTORY_ARG = "-i inventory/<site>"
RESTART = "playbooks/rolling-restart.yml"
THROTTLED_ADVICE = ("not restarted: a restart cools the GPU for a while and cures nothing, and the restart "
                    "budget would burn on it. Check the cooling and the airflow, the power cap and the GPU's "
                    "clocks (nvidia-smi -q -d PERFORMANCE,TEMPERATURE on the host named), then diagnose again "
                    "(docs/diagnose.md, throttled)")
RESTART_HINT = ("a restart cures this: %s restarts the engines that need it one at a time, drained, in "
                "TP-group order, and records a new baseline (docs/restart.md)")


class DiagnosisError(ValueError):
    """The inputs are not what the modules return."""


def _num(value: t.Any) -> float | None:
    """A finite figure as a float, else None (float() of a huge int raises, %d of inf and nan)."""
    number = finite(value)
    return None if number is None else float(number)


def _get(d: t.Any, key: str) -> t.Any:
    return d.get(key) if isinstance(d, dict) else None


def _max(*values: t.Any) -> float | None:
    nums = [v for v in (_num(x) for x in values) if v is not None]
    return max(nums) if nums else None


def diagnose(probe: t.Mapping, kv: t.Mapping | None = None, flags: t.Mapping | None = None,
             context_tokens: int | None = None, engine: str = "", inventory_arg: str = INVENTORY_ARG,
             gpu: t.Mapping | None = None) -> dict:
    """The verdict for one engine: {engine, verdict, summary, evidence, advice}. The advice's
    commands name ``inventory_arg`` (``-i <inventory>``). ``gpu``: host -> what gpu_state_info
    returned there (``throttled``, ``present``, ``reason``), for each of the engine's hosts read."""
    if not isinstance(probe, dict) or "verdict" not in probe:
        raise DiagnosisError("probe must be what vllm_prefill_probe returned (a dict with a verdict)")
    kv = kv if isinstance(kv, dict) else {}
    flags = flags if isinstance(flags, dict) else {}
    passive = _passive(probe)
    evidence = _evidence(probe, kv, passive, context_tokens, gpu)
    throttle = evidence["gpu_throttled"]
    pool, context, usage = evidence["kv_cache_tokens"], evidence["context_tokens"], evidence["kv_cache_usage"]
    window = evidence["window_s"]
    inventory_arg = inventory_arg or INVENTORY_ARG
    restart = command(inventory_arg, RESTART)
    restart_hint = RESTART_HINT % restart

    def out(verdict: str, summary: str, *advice: str) -> dict:
        return {"engine": engine, "verdict": verdict, "summary": summary, "evidence": evidence,
                "advice": list(advice)}

    if probe["verdict"] == "down":
        return out("down", "the engine does not answer: %s" % probe.get("reason", ""),
                   "check the unit on the head (systemctl status, journalctl) and the Ray workers; "
                   "%s restarts the whole engine" % command(inventory_arg, "playbooks/engine.yml"))
    if probe.get("answered") is False:
        return out("wedged", probe.get("reason", ""),
                   "the engine is alive but stuck: restart it (%s); vLLM ends a step stuck past "
                   "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS (300 s) on its own, killing the engine" % restart)
    running = evidence["running"] or 0
    if probe.get("busy") and running > 0 and passive.get("progress") is False:
        return out("wedged", "%d request(s) running but no token was computed in %s s" % (
            running, window), "the engine is alive but stuck: restart it (%s)" % restart)
    rose = evidence["preemptions_in_window"]
    if rose is not None and rose > 0:
        return out("preempting", "%d preemption(s) in %s s: running sessions are being evicted and recomputed"
                   % (rose, window), _preemption_fix(flags))
    timed = probe.get("timed") is True
    if throttle and (probe["verdict"] == "degraded" or _passive_degraded(probe, passive)):
        return out("throttled", "prefill %.2fx its baseline%s while the GPU throttles: %s" % (
            evidence["ratio"] or evidence["passive_ratio"] or 0, ", under load, timed by the engine" if timed else "",
            throttle), THROTTLED_ADVICE)
    if probe["verdict"] == "degraded":
        return out("prefill-degraded", "%sprefill %.2fx its baseline after %s of uptime" % (
            "under load, timed by the engine, " if timed else "", evidence["ratio"] or 0,
            _duration(probe.get("uptime_s"))), restart_hint)
    passive_ratio = _num(passive.get("ratio"))
    if _passive_degraded(probe, passive):
        return out("prefill-degraded", "under load, prefill %.2fx its baseline per token (passive, over %s s) "
                   "after %s of uptime" % (passive_ratio, window, _duration(probe.get("uptime_s"))),
                   restart_hint)
    waiting = evidence["waiting"] or 0
    if waiting > 0 and _pool_full(pool, context, usage):
        sessions = evidence["full_context_sessions"]
        return out("kv-bound", "%d request(s) waiting for the KV pool: %s tokens hold %s full-context session(s) "
                   "of %s tokens, %.0f%% in use, %d running, 0 preemptions" % (
                       waiting, _int(pool), sessions, _int(context), (usage or 0) * 100, running),
                   "expected with --scheduler-reserve-full-isl, not a fault: the waiting session starts when "
                   "one finishes. More concurrent full-context sessions need a larger pool or another engine "
                   "(the gate spreads sessions over several)")
    if probe["verdict"] == "inconclusive" and not probe.get("busy"):
        return out("inconclusive", "the engine answers, but the prefill probe could not call it: %s"
                   % probe.get("reason", ""), "record a baseline (%s right after a start) or probe again when "
                   "the engine is quiet" % command(inventory_arg, "playbooks/verify.yml"))
    if probe.get("busy") and timed and probe["verdict"] == "healthy":
        return out("healthy", "busy but progressing: %d running, %d waiting, no preemptions; prefill %.2fx its "
                   "baseline, timed by the engine" % (running, waiting, evidence["ratio"] or 0))
    if probe.get("busy"):
        judged = ("judged passively (%s)" % ("%.2fx the baseline" % passive_ratio if passive_ratio is not None
                                             else passive.get("reason") or "no reading")
                  if probe.get("passive_judged") is not False else "not judged (%s)" % probe.get("reason", ""))
        return out("healthy", "busy but progressing: %d running, %d waiting, no preemptions; prefill %s" % (
            running, waiting, judged))
    return out("healthy", "prefill %s; nothing waits, nothing is preempted" % (
        "%.2fx its baseline" % evidence["ratio"] if evidence["ratio"] is not None else "as recorded"))



def gpu_brief(result: t.Any) -> dict:
    """What gpu_state_info returned on one host (a loop item's result, failed or not) ->
    {present, throttled, reason}: the figures the diagnosis and its report keep."""
    if not isinstance(result, dict):
        return {"present": None, "throttled": None, "reason": "no result"}
    throttled = result.get("throttled")
    reason = result.get("reason") or (result.get("msg") if result.get("failed") or result.get("unreachable")
                                      else "") or ""
    if result.get("unreachable"):
        reason = "unreachable: %s" % reason
    return {"present": result.get("present") if isinstance(result.get("present"), bool) else None,
            "throttled": throttled[:1000] if isinstance(throttled, str) and throttled else None,
            "reason": str(reason)[:500]}


def _passive_degraded(probe: t.Mapping, passive: t.Mapping) -> bool:
    """An engine that does not time its requests, judged by its passive rate under load."""
    threshold, passive_ratio = _num(probe.get("threshold")), _num(passive.get("ratio"))
    return bool(probe.get("passive_judged") is not False and passive_ratio is not None and threshold
                and passive_ratio >= threshold * PASSIVE_MARGIN)


def _throttle(gpu: t.Any) -> str | None:
    """The engine's hosts whose GPUs throttle now, with why, in one sentence; None when none does."""
    if not isinstance(gpu, dict):
        return None
    parts = ["%s: %s" % (host, state["throttled"]) for host, state in sorted(gpu.items(), key=lambda i: str(i[0]))
             if isinstance(state, dict) and isinstance(state.get("throttled"), str) and state["throttled"]]
    return "; ".join(parts)[:2000] or None


def _passive(probe: t.Mapping) -> dict:
    """The probe's passive reading (a dict), or an empty one."""
    passive = _get(probe, "passive")
    return passive if isinstance(passive, dict) else {}


def _evidence(probe: t.Mapping, kv: t.Mapping, passive: t.Mapping, context_tokens: t.Any,
              gpu: t.Any = None) -> dict:
    """Figures as the modules returned them, or None for one that is no finite
    number (it would raise in a message, and in the result's JSON)."""
    before, after = _get(probe, "metrics_before") or {}, _get(probe, "metrics_after") or {}
    return {
        "probe": probe.get("verdict"),
        "probe_reason": probe.get("reason"),
        "ratio": finite(probe.get("ratio")),
        "threshold": finite(probe.get("threshold")),
        "reference": finite(probe.get("reference")),
        "uptime_s": finite(probe.get("uptime_s")),
        "health_status": finite(probe.get("health_status")),
        "kv_cache_tokens": _num(_get(kv, "kv_cache_tokens")),
        "full_context_sessions": finite(_get(kv, "full_context_sessions")),
        "context_tokens": _num(context_tokens),
        "kv_cache_usage": _max(_get(before, "kv_cache_usage"), _get(after, "kv_cache_usage")),
        "running": _max(_get(before, "running"), _get(after, "running")),
        "waiting": _max(_get(before, "waiting"), _get(after, "waiting")),
        "waiting_for_capacity": _max(_get(before, "waiting_capacity"), _get(after, "waiting_capacity")),
        "preemptions_in_window": _num(passive.get("preemptions")),
        "preemptions_total": _max(_get(after, "preemptions"), _get(before, "preemptions")),
        "passive_seconds_per_token": finite(passive.get("seconds_per_token")),
        "passive_ratio": finite(passive.get("ratio")),
        "window_s": finite(passive.get("window_s")),
        "gpu_throttled": _throttle(gpu),
    }


def _preemption_fix(flags: t.Mapping) -> str:
    """What to change when sessions are preempted, by the flags the engine runs with."""
    if flags.get("scheduler_reserve_full_isl") is False:
        return ("--no-scheduler-reserve-full-isl is set: remove it, so vLLM queues a request whose full "
                "prompt does not fit instead of admitting it and preempting others")
    if _num(flags.get("watermark")):
        return ("--watermark %s is set: remove it, and keep --scheduler-reserve-full-isl on"
                % finite(flags.get("watermark")))
    return ("--scheduler-reserve-full-isl is on and no --watermark is set: running sessions outgrew "
            "the pool while decoding; fewer concurrent sessions or a larger pool")


def _pool_full(pool: float | None, context: float | None, usage: float | None) -> bool:
    """Whether one more full-context session does not fit in what is free."""
    if pool is None or context is None or usage is None or pool <= 0:
        return usage is not None and usage >= 0.9
    return (1.0 - usage) * pool < context


def _int(x: float | None) -> str:
    return "?" if x is None else f"{int(x):,}"


def _duration(seconds: t.Any) -> str:
    s = _num(seconds)
    if s is None:
        return "unknown time"
    if s < 3600:
        return "%d min" % (s // 60)
    if s < 86400 * 2:
        return "%.1f h" % (s / 3600)
    return "%.1f days" % (s / 86400)
