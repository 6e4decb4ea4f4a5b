"""The clock check of an engine's preflight: every host's clock against its head's,
from the samples each host's probe took (the ``gpu_preflight_clock_skew`` filter).
Pure; see :mod:`gpu_preflight` for the verdict's shape."""
from __future__ import annotations

from ansible.module_utils.host.gpu_preflight import Check, number_text


def check_clock_skew(offsets: dict, reference: str, max_skew_s: float, engine: str = "") -> Check:
    """Clocks of one engine's hosts agree within ``max_skew_s`` seconds.

    ``offsets`` maps each host to its clock minus the controller's when the
    probe was sent (``None``: no sample). The dispatch delay is in every
    offset alike, so host-to-host differences are the skew. Measured against
    ``reference`` (the engine's head).
    """
    label = f"engine {engine}: " if engine else ""
    missing = [h for h, o in offsets.items() if o is None]
    if missing:
        return Check(
            "clock_skew",
            False,
            f"{label}no clock sample from {', '.join(missing)}",
            "Their preflight probe did not run or failed; fix that first.",
        )
    if reference not in offsets:
        return Check("clock_skew", False, f"{label}no clock sample from the head {reference}",
                     "The head's preflight probe did not run; fix that first.")
    others = {h: o - offsets[reference] for h, o in offsets.items() if h != reference}
    if not others:
        return Check("clock_skew", True, f"{label}one host ({reference}), nothing to compare")
    parts = [f"{h} {s:+.3f} s" for h, s in others.items()]
    worst = max(abs(s) for s in others.values())
    detail = f"{label}{', '.join(parts)} against the head {reference} (at most {number_text(max_skew_s)} s)"
    if worst <= max_skew_s:
        return Check("clock_skew", True, detail)
    return Check(
        "clock_skew",
        False,
        detail,
        "Synchronise the clocks from one NTP source on every host (`timedatectl set-ntp true`, "
        "`chronyc tracking` shows the offset); skewed clocks scramble the engine's logs and break TLS "
        "and token expiry checks.",
    )
