# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a rolling restart (or an upgrade) proved, and how its run is reported.

Pure (standard library only); the vllm_restart role reaches it through
``plugins/filter/restart.py``. ``pool_check`` compares the KV pool after the
restart with the pool before, ``prefill_check`` the new install's prefill with
the old one's; ``timings`` turns the moments a restart noted into its figures,
``report`` gives every planned engine its outcome, and ``report_line`` is the
one-line summary cron logs. The plan they report on is restart_plan.py's.

Every function raises PlanError and nothing else, as restart_plan.py's do.
"""

from __future__ import annotations

import typing as t

from ansible.module_utils.fleet.restart_plan import PlanError
from ansible.module_utils.shared.numeric import brief, finite, finite_float, shown


def pool_check(before: t.Any, after: t.Any, tolerance: t.Any) -> dict:
    """The KV pool after a restart against before: {before, after, shrink, ok, message}.

    ``shrink`` is the lost fraction (0 when it grew); ``ok`` is false past
    ``tolerance``. An unknown pool before (a dead engine) is never a failure.
    """
    if finite(tolerance) is None or not 0 <= tolerance < 1:
        raise PlanError("the pool tolerance must be a fraction from 0 to below 1, got %s" % shown(tolerance))
    # A pool past float's range, inf or nan is no token count (%d and the shrink raised on them).
    nums = [x if finite(x) is not None and x >= 0 else None for x in (before, after)]
    b, a = nums
    if a is None:
        raise PlanError("the pool after the restart must be a token count, got %s" % shown(after))
    if not b:
        return {"before": b, "after": a, "shrink": None, "ok": True,
                "message": "KV pool %d tokens (none known before)" % a}
    shrink = max(0.0, (b - a) / b)
    ok = shrink <= tolerance
    if a >= b:
        text = "KV pool %d tokens, as before" % a if a == b else "KV pool %d tokens, up from %d" % (a, b)
    else:
        text = "KV pool shrank from %d to %d tokens (%.1f %%%s)" % (
            b, a, shrink * 100, "" if ok else ", past the %.1f %% tolerance (vllm_restart_pool_tolerance)"
            % (tolerance * 100))
    return {"before": b, "after": a, "shrink": round(shrink, 4), "ok": ok, "message": text}


def prefill_check(before: t.Any, after: t.Any, limit: t.Any) -> dict:
    """Prefill per token on the new install against the old baseline:
    {before, after, ratio, limit, ok, message}.

    ``before`` and ``after`` are seconds per prompt token (the probe's
    baselines: the diagnosis' reference on the old install, vllm_verify's new
    one); ``limit`` the largest ratio after/before that passes
    (vllm_restart_prefill_limit: the engine's prefill threshold floor, the
    probe's own noise margin, unless the site says otherwise). Without one of
    the two there is nothing to compare: ok, and the message says so."""
    lim = finite_float(limit)
    if lim is None or not lim >= 1:
        raise PlanError("the prefill limit must be a ratio of 1 or more, got %s" % shown(limit))
    b, a = (v if v is not None and v > 0 else None for v in (finite_float(before), finite_float(after)))
    if b is None or a is None:
        missing = " and ".join(n for n, v in (("before", b), ("after", a)) if v is None)
        return {"before": b, "after": a, "ratio": None, "limit": lim, "ok": True,
                "message": "prefill not compared: no baseline %s (the engine was busy, or none was recorded)"
                           % missing}
    ratio = finite(a / b)
    if ratio is None:  # past float's range: slower than any limit
        return {"before": b, "after": a, "ratio": None, "limit": lim, "ok": False,
                "message": "prefill %.3g s/token against the old install's %.3g s/token, past the %.2fx limit "
                           "(vllm_restart_prefill_limit)" % (a, b, lim)}
    ok = ratio <= lim
    text = "prefill %.3g ms/token, %.2fx the old install's %.3g ms/token" % (a * 1000, ratio, b * 1000)
    return {"before": b, "after": a, "ratio": round(ratio, 3), "limit": lim, "ok": ok,
            "message": text + ("" if ok else ", past the %.2fx limit (vllm_restart_prefill_limit)" % lim)}


# The moments engine.yml notes (epoch seconds): the drain, Ray's stop, the
# server's start, the engine proven ready, and the engine back in service.
MARKS = ("drain", "stop", "start", "ready", "back")


def timings(marks: t.Any, boot_s: t.Any) -> dict:
    """A restart's figures, in seconds to one decimal, from the moments its
    steps began (``MARKS``) and the engine's boot (first /health 200):
    ``drained_s`` (drain to back), ``downtime_s`` (Ray's stop to ready),
    ``ray_s`` (stop to the server's start), ``checks_s`` (start to ready, less
    the boot: the completion, pool, flags and baseline), ``overhead_s`` (the
    drained time less Ray and the boot) and ``engine_boot_s``."""
    at = {k: finite_float((marks if isinstance(marks, dict) else {}).get(k)) for k in MARKS}
    boot = finite_float(boot_s)
    missing = [k for k in MARKS if at[k] is None] + (["the boot"] if boot is None else [])
    if missing:
        raise PlanError("a restart's timings need every moment and the boot, missing: %s" % ", ".join(missing))
    drained = at["back"] - at["drain"]
    ray = at["start"] - at["stop"]
    return {"drained_s": round(drained, 1), "downtime_s": round(at["ready"] - at["stop"], 1), "ray_s": round(ray, 1),
            "checks_s": round(at["ready"] - at["start"] - boot, 1), "overhead_s": round(drained - ray - boot, 1),
            "engine_boot_s": round(boot, 1)}


def report(plan_: t.Any, results: t.Any, consumers_t: t.Any = None, failed: t.Any = "") -> dict:
    """The run's report: the plan's engines with what happened to each.

    ``results`` maps an engine to what its restart recorded (engine.yml);
    ``consumers_t`` holds the epoch seconds at which the direct-mode
    consumers were moved ``away`` and ``back``, which the restarted engine's
    ``drained_s`` and ``overhead_s`` then include. A result's ``marks`` (the
    moments of ``MARKS``) become its figures (:func:`timings`).
    """
    if not isinstance(plan_, dict) or not isinstance(plan_.get("engines"), list):
        raise PlanError("the plan must be what restart_plan returned")
    results = results if isinstance(results, dict) else {}
    moved = consumers_t if isinstance(consumers_t, dict) else {}
    consumers_engine = (plan_.get("consumers_engine") or {}).get("name")
    engines = []
    for e in plan_["engines"]:
        row = {k: e.get(k) for k in ("name", "hosts", "verdict", "summary", "action", "reason")}
        row["drain"] = (e.get("drain") or {}).get("kind")
        got = results.get(e["name"])
        if isinstance(got, dict) and "marks" in got:
            got = {**{k: v for k, v in got.items() if k != "marks"}, **timings(got["marks"], got.get("engine_boot_s"))}
        if e.get("action") == "restart":
            row.update(_result(got))
        else:
            row["outcome"] = "held" if e.get("held") else "skipped"
        away, back = finite_float(moved.get("away")), finite_float(moved.get("back"))
        if (e["name"] == consumers_engine and away is not None and back is not None
                and row.get("outcome") == "restarted"):
            inner = finite_float(row.get("drained_s")) or 0.0
            row["drained_s"] = round(back - away, 1)
            if finite_float(row.get("overhead_s")) is not None:
                row["overhead_s"] = round(finite_float(row["overhead_s"]) + (back - away) - inner, 1)
        engines.append(row)
    outcomes = [r["outcome"] for r in engines]
    outcome = ("failed" if failed or "failed" in outcomes
               else "rolled back" if "rolled back" in outcomes
               else "held" if "held" in outcomes else "succeeded")
    return {"outcome": outcome, "policy": plan_.get("policy"), "mode": plan_.get("mode"), "engines": engines,
            "restarted": [r["name"] for r in engines if r["outcome"] == "restarted"],
            "skipped": [r["name"] for r in engines if r["outcome"] == "skipped"],
            "held": [r["name"] for r in engines if r["outcome"] == "held"],
            "failed": [r["name"] for r in engines if r["outcome"] == "failed"],
            "rolled_back": [r["name"] for r in engines if r["outcome"] == "rolled back"]}


# What an engine's restart records as its outcome (roles/vllm_restart: engine.yml, rollback.yml).
RESULT_OUTCOMES = ("restarted", "failed", "rolled back")


def _result(got: t.Any) -> dict:
    """An engine's recorded result, as the report shows it: none is "not reached"; one without
    a known outcome (its bookkeeping broke part way) is a failure that says so, never a success."""
    if not isinstance(got, dict):
        return {"outcome": "not reached"}
    if got.get("outcome") in RESULT_OUTCOMES:
        return got
    return {**got, "outcome": "failed", "step": got.get("step") or "recording its result",
            "error": "its restart recorded no known outcome (%s): read the run's output for what it did"
                     % brief(got.get("outcome"))}


def _timed(text: str, seconds: t.Any, figure: str) -> str:
    """``text``, the ``figure`` of ``seconds`` when they are a number, and the closing parenthesis."""
    number = finite_float(seconds)
    return text + ("" if number is None else figure % number) + ")"


def report_line(report: t.Any) -> str:
    """The one-line summary of a run, for syslog or a log file."""
    if not isinstance(report, dict):
        raise PlanError("the report must be the rolling restart's report (a dict)")
    parts = []
    for e in report.get("engines") or []:
        if not isinstance(e, dict):
            continue
        outcome = e.get("outcome")
        if outcome == "restarted":
            parts.append(_timed("%s restarted (was %s, drain %s" % (e.get("name"), e.get("verdict"), e.get("drain")),
                                e.get("downtime_s"), ", down %.1f s"))
        elif outcome == "failed":
            parts.append("%s FAILED at %s" % (e.get("name"), e.get("step")))
        elif outcome == "rolled back":
            parts.append(_timed("%s ROLLED BACK (the candidate failed at %s" % (e.get("name"), e.get("step")),
                                e.get("rollback_s"), ", back in %.1f s"))
        elif outcome == "skipped":
            parts.append("%s skipped (%s)" % (e.get("name"), e.get("verdict")))
        elif outcome == "held":
            parts.append("%s HELD (%s, not cured by restart: the restart budget is spent)" % (e.get("name"),
                                                                                            e.get("verdict")))
        else:
            parts.append("%s %s" % (e.get("name"), outcome))
    what = "upgrade" if report.get("policy") == "upgrade" else "rolling restart"
    head = "vllm-fleet %s %s, policy %s" % (what, report.get("outcome", "?"), report.get("policy", "?"))
    return head + (": " + "; ".join(parts) if parts else "")
