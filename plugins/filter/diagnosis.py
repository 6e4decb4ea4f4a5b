"""Filter of the vllm_diagnose role: one engine's verdict from what its head measured.

The logic lives in ``plugins/module_utils/fleet/diagnosis.py``, imported at the
first call.
"""
from __future__ import annotations

import runpy
from collections.abc import Mapping
from pathlib import Path

from ansible.errors import AnsibleFilterError

# Makes plugins/module_utils importable as ansible.module_utils, as for a module.
runpy.run_path(str(Path(__file__).resolve().parents[1] / "module_utils_path.py"))


def _logic():
    from ansible.module_utils.fleet import diagnosis

    return diagnosis


def engine_diagnosis(probe, kv=None, flags=None, context_tokens=None, engine="", inventory_arg="", gpu=None):
    """``vllm_prefill_probe`` + ``vllm_kv_cache_info`` + ``vllm_flags_info`` results (and ``gpu``: host ->
    ``gpu_state_brief`` of gpu_state_info's there) -> the verdict dict, its advice's commands naming
    ``inventory_arg`` (vllm_fleet_inventory_arg)."""
    logic = _logic()
    try:
        # Anything but a mapping goes to diagnose as it is, which names what it needs.
        return logic.diagnose(dict(probe) if isinstance(probe, Mapping) else probe, kv, flags, context_tokens,
                              engine, inventory_arg, gpu=dict(gpu) if isinstance(gpu, Mapping) else None)
    except logic.DiagnosisError as exc:
        raise AnsibleFilterError(str(exc)) from None


def gpu_state_brief(result):
    """gpu_state_info's result on one host (a loop item's) -> {present, throttled, reason}."""
    return _logic().gpu_brief(dict(result) if isinstance(result, Mapping) else result)


def recovery_summary(slurped):
    """A ``slurp`` of the head's recover-state.json (or a skipped or failed one) -> what the
    power-cut recovery did last ({attempts, last_action, last_reason, at, gave_up}), or None."""
    import base64

    from ansible.module_utils.recovery import config as logic

    content = slurped.get("content") if isinstance(slurped, Mapping) else None
    if not isinstance(content, str):
        return None
    try:
        text = base64.b64decode(content).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        text = ""
    return logic.summary(text)


class FilterModule:
    def filters(self):
        return {"engine_diagnosis": engine_diagnosis, "recovery_summary": recovery_summary,
                "gpu_state_brief": gpu_state_brief}
