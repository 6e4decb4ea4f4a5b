"""The gate's admin API as states (module ``vllm_gate``): what a wanted state
asks of the gate, and what its ``GET /admin/state`` says.

Pure logic, standard library only. The gate's admin surface is
gate/vllm_fleet_gate/openapi.json: ``/admin/state``, ``/admin/drain`` and
``/admin/undrain`` (one upstream), ``/admin/hold`` and ``/admin/release``
(every admission). The one meaning of the words the playbooks wait on:

- **idle**: with an upstream, nothing in flight to it (a drained engine's
  last answers are done); without one, nothing in flight or queued at the
  gate (it can be stopped without losing a request);
- **ready**: the gate's own health check sees the upstream ready, so a
  released queue or an undrained engine has somewhere to go.

Every figure of ``/admin/state`` is checked before use: a body that is not
the gate's raises :class:`GateAdminError`, never another exception.
"""
from __future__ import annotations

import typing as t

# The wanted states: present only reads.
STATES = ("present", "drained", "undrained", "held", "released")


class GateAdminError(ValueError):
    """The gate's answer, or the wanted state, does not make sense."""


class Call(t.NamedTuple):
    """One admin request: ``POST path`` with ``body``."""

    path: str
    body: dict


def _count(value: t.Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise GateAdminError("the gate's /admin/state has no count for %s (got %r)" % (what, type(value).__name__))
    return value


def _number(value: t.Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value == value:
        raise GateAdminError("the gate's /admin/state has no number for %s (got %r)" % (what, type(value).__name__))
    return float(value)


def _flag(value: t.Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise GateAdminError("the gate's /admin/state has no true/false for %s (got %r)" % (what, type(value).__name__))
    return value


def read_state(body: t.Any) -> dict:
    """The parts of a ``GET /admin/state`` body the toolkit acts on:
    ``held``, ``inflight``, ``queued``, ``queue_timeout_s``, ``max_hold_s``
    and ``upstreams`` ({name: {ready, drained, inflight}})."""
    if not isinstance(body, dict):
        raise GateAdminError("the gate's /admin/state is not a JSON object")
    queue = body.get("queue")
    upstreams = body.get("upstreams")
    if not isinstance(queue, dict):
        raise GateAdminError("the gate's /admin/state has no queue")
    if not isinstance(upstreams, dict):
        raise GateAdminError("the gate's /admin/state has no upstreams")
    engines = {}
    for name, upstream in upstreams.items():
        if not isinstance(upstream, dict):
            raise GateAdminError("the gate's /admin/state has no object for upstream %r" % (name,))
        engines[str(name)] = {
            "ready": _flag(upstream.get("ready"), "upstream %s's ready" % name),
            "drained": _flag(upstream.get("drained"), "upstream %s's drained" % name),
            "inflight": _count(upstream.get("inflight"), "upstream %s's in-flight requests" % name),
        }
    return {
        "held": _flag(body.get("held"), "held"),
        "inflight": _count(body.get("inflight"), "in-flight requests"),
        "queued": _count(body.get("queued"), "queued requests"),
        "queue_timeout_s": _number(queue.get("timeout_s"), "the queue's timeout"),
        "max_hold_s": _number(body.get("max_hold_s"), "the longest hold"),
        "upstreams": engines,
    }


def _upstream(state: dict, upstream: str | None) -> dict | None:
    if not upstream:
        return None
    if upstream not in state["upstreams"]:
        raise GateAdminError("the gate has no upstream %r (it has: %s)"
                             % (upstream, ", ".join(sorted(state["upstreams"])) or "none"))
    return state["upstreams"][upstream]


def facts(state: dict, upstream: str | None = None) -> dict:
    """What the playbooks wait on, from :func:`read_state`'s result: ``idle``,
    ``ready`` (None without an upstream), the ``drained`` upstreams, ``held``
    and the gate's limits."""
    engine = _upstream(state, upstream)
    if engine is None:
        idle = state["inflight"] == 0 and state["queued"] == 0
    else:
        idle = engine["inflight"] == 0
    return {
        "idle": idle,
        "ready": None if engine is None else engine["ready"],
        "held": state["held"],
        "drained": sorted(name for name, e in state["upstreams"].items() if e["drained"]),
        "inflight": state["inflight"] if engine is None else engine["inflight"],
        "queued": state["queued"],
        "queue_timeout_s": state["queue_timeout_s"],
        "max_hold_s": state["max_hold_s"],
    }


def call_for(state: dict, wanted: str, upstream: str | None = None, hold_s: t.Any = None) -> Call | None:
    """The request that takes the gate from ``state`` to ``wanted``; None when
    it is there already (or ``wanted`` is present). A hold is always asked
    again: it restarts the gate's hold clock."""
    if wanted not in STATES:
        raise GateAdminError("state must be one of %s, got %r" % (", ".join(STATES), wanted))
    if wanted in ("drained", "undrained"):
        if not upstream:
            raise GateAdminError("state=%s needs the upstream (the engine's name)" % wanted)
        drained = _upstream(state, upstream)["drained"]
        if drained == (wanted == "drained"):
            return None
        return Call("/admin/drain" if wanted == "drained" else "/admin/undrain", {"upstream": upstream})
    if wanted == "held":
        seconds = hold_s
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
            raise GateAdminError("state=held needs hold_s, a positive number of seconds, got %r" % (hold_s,))
        # The gate's own limit, read live (its config caps it at 3600 s).
        if seconds > state["max_hold_s"]:
            raise GateAdminError("a %g s hold is past the gate's longest (max_hold_s %g s): raise "
                                 "gate_service_max_hold_s or hold for less" % (seconds, state["max_hold_s"]))
        return Call("/admin/hold", {"seconds": seconds})
    if wanted == "released":
        return Call("/admin/release", {}) if state["held"] else None
    return None
