"""Filter of the vllm_diagnose role: one engine's verdict from what its head measured.

The logic lives in ``plugins/module_utils/diagnosis.py`` (standard library
only); filter plugins cannot import the project's module_utils through
``ansible.module_utils``, so it is loaded by file path, after the
``numeric.py`` it imports.
"""
from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from pathlib import Path

from ansible.errors import AnsibleFilterError

_MODULE_UTILS = Path(__file__).resolve().parent.parent / "module_utils"


def _load(stem: str, name: str):
    """plugins/module_utils/<stem>.py as the module ``name``."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, _MODULE_UTILS / f"{stem}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _logic():
    # Under the name diagnosis.py imports it by, as Ansible ships it to a module.
    _load("numeric", "ansible.module_utils.numeric")
    _load("commands", "ansible.module_utils.commands")
    return _load("diagnosis", "vllm_fleet_diagnosis_logic")


def engine_diagnosis(probe, kv=None, flags=None, context_tokens=None, engine="", inventory_arg=""):
    """``vllm_prefill_probe`` + ``vllm_kv_cache_info`` + ``vllm_flags_info`` results -> the verdict dict,
    its advice's commands naming ``inventory_arg`` (vllm_fleet_inventory_arg)."""
    logic = _logic()
    try:
        # Anything but a mapping goes to diagnose as it is, which names what it needs.
        return logic.diagnose(dict(probe) if isinstance(probe, Mapping) else probe, kv, flags, context_tokens,
                              engine, inventory_arg)
    except logic.DiagnosisError as exc:
        raise AnsibleFilterError(str(exc)) from None


def recovery_summary(slurped):
    """A ``slurp`` of the head's recover-state.json (or a skipped or failed one) -> what the
    power-cut recovery did last ({attempts, last_action, last_reason, at, gave_up}), or None."""
    import base64

    _load("ray_cluster", "ansible.module_utils.ray_cluster")
    logic = _load("engine_recovery", "vllm_fleet_engine_recovery_logic")
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
        return {"engine_diagnosis": engine_diagnosis, "recovery_summary": recovery_summary}
