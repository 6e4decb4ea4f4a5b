# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rolling restart, decided before any host changes.

Pure (standard library only); the vllm_restart role reaches it through
``plugins/filter/restart.py``. ``plan`` takes the engine records, each
engine's diagnosis (``diagnosis.py``) and the serving set-up, and says which
engines restart, in which order, and how each is drained, or why the run is
refused. A refusal lists every reason at once and nothing has changed yet.

An engine *serves* unless it is down or wedged. Before an engine restarts,
its consumers must be able to go somewhere:

- gate mode, another engine serves: the gate drains this one (in-flight
  requests finish there, new ones go to the others);
- gate mode, no other engine serves: the gate holds admissions for the
  expected restart plus a margin, refused when that outlasts the gate's queue
  timeout or its longest hold;
- direct mode, the consumers point at this engine: they are repointed at
  another serving engine, else at the named fallback endpoint (planned
  fallbacks), else, if it serves, the outage must be accepted;
- an engine that does not serve (gate mode), or that no consumer points at
  (direct mode), needs no drain.

Engines that do not serve restart first: they add no outage, and the ones
after can then drain onto them. In direct mode the engine the consumers use
restarts last, in its own play between moving them away and back.

What a restart proved and how the run is reported (the pool and prefill
checks, the timings, the report and its one line) are restart_report.py's.

Every function raises PlanError and nothing else: a number that is no finite
number (inf, nan, an int past float's range, 5,000 digits) is refused where
one is required and read as none elsewhere, and a value quoted in a message
is cut (numeric.shown).
"""

from __future__ import annotations

import typing as t

from ansible.module_utils.fleet.commands import command
from ansible.module_utils.shared.numeric import finite, shown

POLICIES = ("always", "when-degraded")
MODES = ("direct", "gate")
# What a restart cures (diagnosis.py's verdicts).
CURED = ("prefill-degraded", "wedged", "down")
NOT_SERVING = ("down", "wedged")
ACCEPT = "-e restart_accept_outage=true"
PLAYBOOK = "playbooks/rolling-restart.yml"
UPGRADE_PLAYBOOK = "playbooks/upgrade.yml"

# Why a when-degraded run leaves an engine alone, by verdict; the {...} are
# command lines with the run's own inventory (commands.command()).
_SKIP = {
    "healthy": "healthy: nothing to cure",
    "kv-bound": ("kv-bound: the pool is full and the engine queues the excess, as it should; a restart frees "
                 "nothing that finishing sessions would not"),
    "preempting": ("preempting: the running flags make it preempt, and a restart keeps them; fix the flags "
                   "({diagnose} says which) and run {engine}"),
    "inconclusive": "inconclusive is not degraded, so it is not restarted; {always} restarts anyway",
    "throttled": ("throttled: a GPU of the engine runs a thermal or power throttle; a restart cools it for a "
                  "while and cures nothing ({diagnose} names the host and the reason)"),
}


class PlanError(ValueError):
    """The inputs are not what the playbook passes (a bad policy, mode or number)."""


def _positive(name: str, value: t.Any) -> float:
    number = finite(value)
    if number is None or not number > 0:
        raise PlanError("%s must be a positive number of seconds, got %s" % (name, shown(value)))
    return float(number)


def _optional_limit(name: str, value: t.Any) -> float | None:
    return None if value is None else _positive(name, value)


def _engines(engines: t.Any) -> list[dict]:
    if not isinstance(engines, list) or not engines:
        raise PlanError("engines must be the non-empty list of engine records (vllm_fleet_engines)")
    for e in engines:
        if not isinstance(e, dict) or not e.get("name") or not isinstance(e.get("hosts"), list) or not e["hosts"]:
            raise PlanError("every engine record needs a name and its hosts (vllm_fleet_engines), got %s"
                            % shown(e, 200))
    return engines


def _verdict(verdicts: t.Mapping, name: str) -> dict:
    v = verdicts.get(name)
    if not isinstance(v, dict) or not isinstance(v.get("verdict"), str):
        raise PlanError("engine %s has no diagnosis (vllm_diagnose_result of its head)" % name)
    return v


def _why_restart(policy: str, verdict: str, summary: str, inventory_arg: str = "") -> tuple[bool, str]:
    if policy == "always":
        return True, "restart_policy=always (diagnosed %s)" % verdict
    if verdict in CURED:
        return True, "%s: %s" % (verdict, summary) if summary else verdict
    why = _SKIP.get(verdict, "%s: not something a restart cures" % verdict)
    return False, why.format(diagnose=command(inventory_arg, "playbooks/diagnose.yml"),
                             engine=command(inventory_arg, "playbooks/engine.yml"),
                             always=command(inventory_arg, PLAYBOOK, "-e restart_policy=always"))


def plan(engines: t.Any, verdicts: t.Any, policy: t.Any = "when-degraded", accept_outage: t.Any = False,
         mode: t.Any = "direct", consumer_url: t.Any = "", fallback_url: t.Any = "",
         gate: t.Mapping | None = None, expected_restart_s: t.Any = 120, hold_margin_s: t.Any = 30,
         consumers_at: t.Any = None, only: t.Any = None, inventory_arg: t.Any = "",
         changes: t.Any = None, budgets: t.Any = None) -> dict:
    """The restart plan: {policy, mode, engines, hosts, batches, consumers_engine, back, undrain, left, refused,
    held, warnings}.

    ``consumer_url`` is the OpenAI base URL the consumers use in direct mode
    ('' without consumer hosts); ``gate`` holds the live gate's
    ``queue_timeout_s`` and ``max_hold_s``. ``hosts`` and ``batches`` are the
    restart play's host list and ``serial`` (one batch per engine, head
    first). ``consumers_engine`` is the engine the consumers talk to in direct mode when it
    restarts: it goes last, in its own play, between moving the consumers away
    and back. ``engines`` lists the restarts in order, then the skipped ones.

    ``only`` (restart_engines) names the engines this run may restart; the
    others are skipped, whatever they read. Empty or None: every engine.

    ``budgets`` maps an engine to its restart budget's decision
    (watch/budget.py's ``Decision.as_dict``: restart, warning, message). An
    engine that would restart but whose budget refuses is skipped and
    ``held``: it is named there with the refusal ("not cured by restart"),
    and the run fails at its report. The warnings of the budgets the policy
    "always" overrides are in ``warnings``. None: no budget (an upgrade).

    ``changes`` makes it an upgrade's plan (playbooks/upgrade.yml): it maps
    each engine to what its switch changes ("" when it runs the candidate
    already); an engine restarts when its change is not empty, whatever it
    reads, with the change as its reason, and when it runs the candidate
    already but does not serve (a stopped upgrade). The commands the plan
    names are then the upgrade's.

    ``inventory_arg`` (vllm_fleet_inventory_arg) is the run's own -i options:
    every command the plan's reasons and refusals name carries it.

    What a stopped run (interrupted, killed) left behind is put right here:
    ``consumers_at`` lists the base URLs the direct-mode consumers recorded;
    when one is not ``consumer_url`` and its engine does not restart (so it
    serves: a restart cures every verdict that does not), ``back`` is true
    (bring them back). ``gate['drained']`` names the engines drained at the
    gate; those that do not restart are in ``undrain``. ``left`` says, a line
    each, what was found and what happens to it.
    """
    accept, expected, margin, gate, limits = _settings(policy, mode, accept_outage, consumer_url, fallback_url,
                                                       verdicts, expected_restart_s, hold_margin_s, gate)
    records = _engines(engines)
    named = _only(only, [e["name"] for e in records])
    rows = _rows(records, verdicts, policy, named, inventory_arg)
    held, warnings = _budgets(rows, budgets)
    playbook = PLAYBOOK
    if changes is not None:
        playbook = UPGRADE_PLAYBOOK
        _upgrade_rows(rows, changes)

    def is_consumers_engine(r: dict) -> bool:
        return mode == "direct" and bool(consumer_url) and _same_url(consumer_url, r["api_url"])

    order = _order(rows, is_consumers_engine)
    refused: list[str] = []
    restarted: list[str] = []
    for r in order:
        others = [o for o in rows if o["name"] != r["name"] and (o["serving"] or o["name"] in restarted)]
        r["drain"] = _drain(r, others, mode, consumer_url, is_consumers_engine(r), fallback_url, limits, expected,
                            margin, accept, refused, command(inventory_arg, playbook, ACCEPT))
        restarted.append(r["name"])
    batched = [r for r in order if not is_consumers_engine(r)]
    last = next((r for r in order if is_consumers_engine(r)), None)
    back, undrain, left = _left_behind(rows, mode, consumer_url, consumers_at, gate.get("drained"), is_consumers_engine)
    return {
        "policy": "upgrade" if changes is not None else policy, "mode": mode, "accept_outage": accept,
        "engines": order + [r for r in rows if r["action"] == "skip"],
        "hosts": [h for r in batched for h in r["hosts"]],
        "batches": [len(r["hosts"]) for r in batched],
        "consumers_engine": (None if last is None
                             else {"name": last["name"], "hosts": last["hosts"], "drain": last["drain"]}),
        "back": back, "undrain": undrain, "left": left,
        "refused": refused, "held": held, "warnings": warnings,
    }


def _settings(policy: t.Any, mode: t.Any, accept_outage: t.Any, consumer_url: t.Any, fallback_url: t.Any,
              verdicts: t.Any, expected_restart_s: t.Any, hold_margin_s: t.Any, gate: t.Mapping | None) -> tuple:
    """plan()'s settings checked: (accept, expected_s, margin_s, gate, the gate's limits)."""
    if policy not in POLICIES:
        raise PlanError("restart_policy must be one of %s, got %s" % (", ".join(POLICIES), shown(policy)))
    if mode not in MODES:
        raise PlanError("the serving mode must be one of %s, got %s" % (", ".join(MODES), shown(mode)))
    accept = _flag("restart_accept_outage", accept_outage)
    for name, value in (("consumer_url", consumer_url), ("fallback_url", fallback_url)):
        if not isinstance(value, str):
            raise PlanError("%s must be a URL string, got %s" % (name, shown(value)))
    if not isinstance(verdicts, dict):
        raise PlanError("verdicts must map each engine's name to its diagnosis")
    expected = _positive("vllm_restart_expected_s", expected_restart_s)
    margin = _positive("vllm_restart_hold_margin_s", hold_margin_s)
    gate = dict(gate or {})
    limits = [x for x in (_optional_limit("the gate's queue timeout", gate.get("queue_timeout_s")),
                          _optional_limit("the gate's longest hold", gate.get("max_hold_s"))) if x is not None]
    return accept, expected, margin, gate, limits


def _order(rows: list[dict], is_consumers_engine: t.Callable[[dict], bool]) -> list[dict]:
    """The restarts in order: engines that do not serve first (they add no outage, and the ones
    after can drain onto them), then the serving ones, the consumers' own engine last."""
    todo = [r for r in rows if r["action"] == "restart"]
    others_first = [r for r in todo if not is_consumers_engine(r)]
    return ([r for r in others_first if not r["serving"]] + [r for r in others_first if r["serving"]]
            + [r for r in todo if is_consumers_engine(r)])


def _budgets(rows: list[dict], budgets: t.Any) -> tuple[list[dict], list[str]]:
    """Hold back the engines whose restart budget refuses; the overrides' warnings."""
    if budgets is None:
        return [], []
    if not isinstance(budgets, dict):
        raise PlanError("budgets must map each engine's name to its budget's decision, got %s" % shown(budgets))
    held, warnings = [], []
    for r in rows:
        if r["action"] != "restart":
            continue
        decision = budgets.get(r["name"])
        if not isinstance(decision, dict) or not isinstance(decision.get("restart"), bool):
            raise PlanError("engine %s has no restart budget's decision (vllm_restart_budget of its head)" % r["name"])
        if decision["restart"]:
            if decision.get("warning"):
                warnings.append(str(decision["warning"]))
            continue
        r["action"], r["reason"], r["held"] = "skip", str(decision.get("message") or "not cured by restart"), True
        held.append({"name": r["name"], "message": r["reason"]})
    return held, warnings


def _rows(records: list[dict], verdicts: t.Mapping, policy: str, named: list[str],
          inventory_arg: t.Any) -> list[dict]:
    """One row per engine, in inventory order: its verdict, and whether it restarts and why
    (an engine ``named`` leaves out is skipped, whatever it reads)."""
    rows = []
    for e in records:
        v = _verdict(verdicts, e["name"])
        restart, reason = _why_restart(policy, v["verdict"], str(v.get("summary") or ""), inventory_arg)
        if named and e["name"] not in named:
            restart, reason = False, "not named in restart_engines"
        rows.append({"name": e["name"], "head": e.get("head", e["hosts"][0]), "hosts": list(e["hosts"]),
                     "api_url": str(e.get("api_url", "")), "verdict": v["verdict"],
                     "summary": v.get("summary", ""), "serving": v["verdict"] not in NOT_SERVING,
                     "action": "restart" if restart else "skip", "reason": reason, "drain": None})
    return rows


def _upgrade_rows(rows: list[dict], changes: t.Any) -> None:
    """An upgrade restarts the engines whose switch changes something (see plan())."""
    if not isinstance(changes, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                for k, v in changes.items()):
        raise PlanError("changes must map each engine's name to what its switch changes, got %s" % shown(changes))
    unknown = sorted(set(changes) - {r["name"] for r in rows})
    if unknown:
        raise PlanError("changes names %s, which the inventory does not define" % ", ".join(unknown))
    for r in rows:
        if r["action"] == "skip" and r["reason"] == "not named in restart_engines":
            continue
        change = changes.get(r["name"], "")
        if change:
            r["action"], r["reason"] = "restart", "upgrade: %s" % change
        elif not r["serving"]:
            # A stopped run can leave an engine switched but not serving: it restarts, proven.
            r["action"], r["reason"] = "restart", "%s: it runs the candidate already but does not serve" % r["verdict"]
        else:
            r["action"], r["reason"] = "skip", "runs the candidate already"


def _left_behind(rows: list[dict], mode: str, consumer_url: str, consumers_at: t.Any, drained: t.Any,
                 is_consumers_engine: t.Callable[[dict], bool]) -> tuple[bool, list[str], list[str]]:
    """(back, undrain, left): see plan()."""
    for name, value in (("consumers_at", consumers_at), ("the gate's drained engines", drained)):
        if value is not None and (not isinstance(value, list) or not all(isinstance(x, str) for x in value)):
            raise PlanError("%s must be a list of strings, got %s" % (name, shown(value)))
    back, undrain, left = False, [], []
    away = sorted({u for u in consumers_at or [] if u and not _same_url(u, consumer_url)})
    if mode == "direct" and consumer_url and away:
        target = next((r for r in rows if is_consumers_engine(r)), None)
        where = ", ".join(away)
        if target is None:
            left.append("the consumers are on %s, not %s, which is no engine's API: they stay there" % (
                where, consumer_url))
        elif target["action"] == "restart":
            left.append("the consumers are on %s (a run stopped before it brought them back): they come back "
                        "once %s restarted" % (where, target["name"]))
        else:  # skipped: it serves (a restart cures every verdict that does not)
            back = True
            left.append("the consumers are on %s (a run stopped before it brought them back): they come back to "
                        "%s, which serves (%s)" % (where, target["name"], target["verdict"]))
    for name in sorted(set(drained or [])) if mode == "gate" else []:
        r = next((x for x in rows if x["name"] == name), None)
        if r is None:
            left.append("the gate has %s drained, which is no engine of the inventory: it stays drained" % name)
        elif r["action"] == "restart":
            left.append("the gate has %s drained (a run stopped before it undrained it): it is undrained once "
                        "it restarted" % name)
        else:  # skipped, so it serves
            undrain.append(name)
            left.append("the gate has %s drained (a run stopped before it undrained it): it is undrained now, "
                        "it serves (%s)" % (name, r["verdict"]))
    return back, undrain, left


def _only(only: t.Any, names: list[str]) -> list[str]:
    """restart_engines as a list of engine names (a comma-separated string from -e too)."""
    if only is None or only == "" or only == []:
        return []
    if isinstance(only, str):
        only = [x.strip() for x in only.split(",") if x.strip()]
    if not isinstance(only, list) or not all(isinstance(x, str) for x in only):
        raise PlanError("restart_engines must be a list of engine names, got %s" % shown(only))
    unknown = [x for x in only if x not in names]
    if unknown:
        raise PlanError("restart_engines names %s, which the inventory does not define (its engines: %s)"
                        % (", ".join(unknown), ", ".join(names)))
    return only


def _flag(name: str, value: t.Any) -> bool:
    """A boolean from YAML or from ``-e name=true`` (a string)."""
    if isinstance(value, bool):
        return value
    words = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
    if isinstance(value, str) and value.strip().lower() in words:
        return words[value.strip().lower()]
    raise PlanError("%s must be true or false, got %s" % (name, shown(value)))


def _same_url(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


def _drain(r: dict, others: list[dict], mode: str, consumer_url: str, is_fed: bool, fallback_url: str,
           limits: list[float], expected: float, margin: float, accept: bool, refused: list[str],
           accept_with: str) -> dict:
    name = r["name"]
    if mode == "gate":
        if not r["serving"]:
            return {"kind": "none", "why": "it does not serve now (%s): the gate sends it nothing" % r["verdict"]}
        if others:
            return {"kind": "gate-drain", "upstream": name,
                    "why": "the gate sends new requests to %s while in-flight ones finish here"
                           % ", ".join(o["name"] for o in others)}
        hold = expected + margin
        limit = min(limits) if limits else None
        if limit is None or hold <= limit:
            return {"kind": "gate-hold", "hold_s": hold,
                    "why": "the only serving engine: the gate holds admissions for %g s (restart %g s + margin %g s)"
                           % (hold, expected, margin)}
        if accept:
            return {"kind": "none", "why": "outage accepted: a %g s hold would outlast the gate's %g s limit" % (
                hold, limit)}
        refused.append(
            "engine %s is the only serving engine, and holding the gate for its restart (%g s + %g s margin) "
            "would outlast the gate's queue timeout or longest hold (%g s), so queued requests would fail. "
            "Raise gate_service_queue_timeout_s and gate_service_max_hold_s, lower vllm_restart_expected_s if the "
            "restart is faster, or accept the outage: %s" % (name, expected, margin, limit, accept_with))
        return {"kind": "refused", "why": "the hold would outlast the gate's limit"}
    if not consumer_url:
        return {"kind": "none", "why": "no consumer host in the inventory"}
    if not is_fed:
        return {"kind": "none", "why": "no consumer points at it (they use %s)" % consumer_url}
    if others:
        return {"kind": "repoint", "url": others[0]["api_url"],
                "why": "the consumers use %s while it restarts" % others[0]["name"]}
    if fallback_url:
        return {"kind": "fallback", "url": fallback_url,
                "why": "the consumers use the fallback %s while it restarts (planned)" % fallback_url}
    if not r["serving"]:
        return {"kind": "none", "why": "it does not serve now (%s), so its restart adds no outage" % r["verdict"]}
    if accept:
        return {"kind": "none", "why": "outage accepted: the consumers get errors while it restarts"}
    refused.append(
        "engine %s is the only serving engine and its consumers talk to it directly: they would get errors "
        "for the whole restart. Name a fallback endpoint (vllm_fleet_fallback_url), or accept the outage "
        "with: %s" % (name, accept_with))
    return {"kind": "refused", "why": "an outage nobody accepted"}
