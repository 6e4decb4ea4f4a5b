# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU's own state, from ``nvidia-smi -q -d PERFORMANCE,TEMPERATURE``: which
clock-event (throttle) reasons are active, their counters, and the temperatures.

A restart cools a GPU, so a thermal throttle reads as cured for a while and the
restart budget burns on what no restart cures (issue 43; GB10 reports of 85-98 C
and capped clocks: docs/design/spark-field-facts/05-gb10-thermal-and-clocks.md).
:func:`throttled` names an active thermal or power reason, so the diagnosis can say
``throttled`` instead of blaming the engine.

Shapes read (tests/fixtures/gpu-field/nvidia-smi/, each with its public source):
the section ``Clocks Event Reasons`` (``Clocks Throttle Reasons`` before driver
530), values ``Active`` / ``Not Active`` / ``N/A``, the ``... Counters`` section in
microseconds, and GB10's ``GPU T.Limit Temp`` (a margin below the slowdown point,
not an absolute limit). Linear in its input; GpuStateError is the only exception.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ansible.module_utils.shared.text_input import text_input

MAX_TEXT = 16 * 1024 * 1024
# Reasons that slow the clocks because of heat or power: what a restart cannot cure.
THROTTLES = ("SW Power Cap", "HW Slowdown", "HW Thermal Slowdown", "HW Power Brake Slowdown",
             "SW Thermal Slowdown")
_GPU = re.compile(r"GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])$", re.ASCII)
_PAIR = re.compile(r"([A-Za-z][A-Za-z0-9 ./()_-]{0,60}?) *: (.{0,200})$")
_TEMP = re.compile(r"(-?[0-9]{1,4}) C$", re.ASCII)
_MICROS = re.compile(r"([0-9]{1,20}) us$", re.ASCII)
_REASONS = ("Clocks Event Reasons", "Clocks Throttle Reasons")


class GpuStateError(ValueError):
    """The text is no ``nvidia-smi -q`` output (not text, too large, or no GPU in it)."""


@dataclass
class GpuState:
    bus_id: str
    performance_state: str | None = None
    active: list[str] = field(default_factory=list)        # every reason reading Active
    counters_us: dict[str, int] = field(default_factory=dict)
    temp_c: int | None = None
    t_limit_margin_c: int | None = None                    # GB10: degrees left before the slowdown
    slowdown_temp_c: int | None = None


def _temp(value: str) -> int | None:
    m = _TEMP.match(value.strip())
    return int(m.group(1)) if m else None


def read(text: str | bytes) -> list[GpuState]:
    """Each GPU's state, in the output's order."""
    text = text_input(text, "nvidia-smi's output", MAX_TEXT, GpuStateError)
    gpus: list[GpuState] = []
    section, section_indent = None, 0
    for raw in text.split("\n"):
        line = raw.strip()
        if not line or len(line) > 300:
            continue
        m = _GPU.match(line)
        if m:
            gpus.append(GpuState(m.group(1)))
            section = None
            continue
        if not gpus:
            continue
        gpu = gpus[-1]
        indent = len(raw) - len(raw.lstrip())
        if section is not None and indent <= section_indent:
            section = None  # back at the section title's depth: its lines ended
        if ":" not in line:
            # A section's title ("Clocks Event Reasons", "Temperature"), or a group within one
            # (the old "HW Slowdown" had none): the outermost title names the section.
            if section is None:
                section, section_indent = line, indent
            continue
        pair = _PAIR.match(line)
        if not pair:
            continue
        key, value = pair.group(1).strip(), pair.group(2).strip()
        if key == "Performance State":
            gpu.performance_state = value[:8]
        elif section in _REASONS and value == "Active":
            gpu.active.append(key)
        elif section and section.startswith(_REASONS) and section.endswith("Counters"):
            micros = _MICROS.match(value)
            if micros:
                gpu.counters_us[key] = int(micros.group(1))
        elif section == "Temperature":
            if key == "GPU Current Temp":
                gpu.temp_c = _temp(value)
            elif key == "GPU T.Limit Temp":
                gpu.t_limit_margin_c = _temp(value)
            elif key == "GPU Slowdown Temp":
                gpu.slowdown_temp_c = _temp(value)
    if not gpus:
        raise GpuStateError("no GPU in the output: run nvidia-smi -q -d PERFORMANCE,TEMPERATURE")
    return gpus


def throttled(gpus: list[GpuState]) -> str | None:
    """Why the GPUs run slowed by heat or power right now, in one sentence; None when no
    thermal or power reason is active. Idle, the applications' clocks and the display
    clock are settings, not throttles."""
    parts = []
    for gpu in gpus:
        reasons = [r for r in gpu.active if r in THROTTLES]
        if not reasons:
            continue
        heat = f" at {gpu.temp_c} C" if gpu.temp_c is not None else ""
        if gpu.t_limit_margin_c is not None:
            heat += f", {gpu.t_limit_margin_c} C below its slowdown point"
        elif gpu.slowdown_temp_c is not None:
            heat += f" (slowdown at {gpu.slowdown_temp_c} C)"
        parts.append(f"GPU {gpu.bus_id}: {', '.join(reasons)} active{heat}")
    return "; ".join(parts) or None
