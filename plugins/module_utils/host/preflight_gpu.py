"""The GPU checks of a host's preflight: driver, count, memory (a unified-memory GPU
measured by the host's ``/proc/meminfo``) and CUDA version, from the ``SmiReport``
of :mod:`nvidia_smi`. Pure; see :mod:`gpu_preflight` for the verdict's shape."""
from __future__ import annotations

import re

from ansible.module_utils.host.gpu_preflight import GIB, Check, PreflightError, gib_text, number_text, program_lines
from ansible.module_utils.shared.versions import version_at_least


def check_gpu_driver(report, error=None) -> Check:
    """nvidia-smi ran and read the driver. ``error`` is an ``NvidiaSmiError``
    (a ``NvidiaSmiFailure`` carries its ``kind`` and ``hint``)."""
    if error is not None:
        kind = getattr(error, "kind", "unreadable_output")
        hint = getattr(error, "hint", None) or (
            "Run nvidia-smi on the host and read its output; if it looks normal, "
            "add it to tests/fixtures/nvidia-smi/ and report it."
        )
        return Check(
            "gpu_driver",
            False,
            f"nvidia-smi failed ({kind}): {error}. GPU count, memory and CUDA were not checked.",
            hint,
        )
    names = ", ".join(f"{g.index} {g.name or '?'}" for g in report.gpus) or "none"
    driver = report.driver_version or "not reported"
    cuda = report.cuda_version or "not reported"
    return Check(
        "gpu_driver", True, f"driver {driver}, CUDA {cuda}; nvidia-smi sees {report.gpu_count} GPU(s): {names}"
    )


def check_gpu_count(report, min_gpus: int) -> Check:
    count = report.gpu_count
    if count >= min_gpus:
        return Check("gpu_count", True, f"{count} GPU(s) visible, {min_gpus} required")
    return Check(
        "gpu_count",
        False,
        f"{count} GPU(s) visible, {min_gpus} required",
        "Compare `nvidia-smi -L` with the hardware; a GPU that fell off the bus shows as an Xid 79 "
        "in `dmesg` and needs a power cycle. Inside a container, pass every GPU in.",
    )


# The kernel prints each value as an unsigned 64-bit number: at most 20 digits.
_MEMINFO_LINE = re.compile(r"([A-Za-z0-9_()]+):[ \t]+([0-9]{1,20})(?:[ \t]+(kB))?[ \t]*")


def parse_meminfo(text: str) -> dict:
    """``/proc/meminfo`` as ``{key: bytes}`` (values are printed in kB).

    A line that is not ``Key: <digits> [kB]`` is skipped. Raises
    :class:`PreflightError` (only) when no readable MemTotal line is left.
    """
    values = {}
    for line in program_lines(text):
        match = _MEMINFO_LINE.fullmatch(line)
        if match:
            values[match.group(1)] = int(match.group(2)) * (1024 if match.group(3) else 1)
    if "MemTotal" not in values:
        raise PreflightError("/proc/meminfo has no MemTotal line")
    return values


def check_gpu_memory(report, min_gib: float, meminfo_text: str | None = None):
    """Every GPU has at least ``min_gib``. Return ``(Check, memory_source)``.

    A unified-memory GPU (GB10: nvidia-smi reports ``[N/A]`` / ``Not
    Supported``) is measured by the host's MemTotal instead; ``memory_source``
    is then ``"host meminfo"``, otherwise ``"gpu"``.
    """
    parts, short = [], []
    source = "gpu"
    host_total = None
    for gpu in report.gpus:
        label = f"GPU {gpu.index} {gpu.name or '?'}"
        if gpu.unified_memory or gpu.memory_total_mib is None:
            if not gpu.unified_memory:
                return Check(
                    "gpu_memory",
                    False,
                    f"{label}: nvidia-smi reported no memory total",
                    "Run `nvidia-smi --query-gpu=memory.total --format=csv` on the host and compare.",
                ), None
            source = "host meminfo"
            if host_total is None:
                try:
                    host_total = parse_meminfo(meminfo_text)["MemTotal"]
                except PreflightError as exc:
                    return Check(
                        "gpu_memory",
                        False,
                        f"{label} has unified memory (nvidia-smi: [N/A] / Not Supported) and {exc}",
                        "Check that /proc is mounted and readable on the host.",
                    ), source
            have = host_total
            parts.append(
                f"{label}: unified memory (nvidia-smi reports [N/A] / Not Supported), "
                f"host MemTotal from /proc/meminfo {gib_text(have)}"
            )
        else:
            have = gpu.memory_total_mib * 1024 ** 2
            parts.append(f"{label}: {gib_text(have)}")
        if have < min_gib * GIB:
            short.append(label)
            parts[-1] += ", too small"
    detail = "; ".join(parts) or "no GPU"
    detail += f" (at least {number_text(min_gib)} GiB each)"
    if short:
        return Check(
            "gpu_memory",
            False,
            detail,
            "The model's share of the weights plus its KV cache must fit on each GPU. Use a host with "
            "more GPU memory, or lower min_gpu_memory_gib if the model is known to fit.",
        ), source
    return Check("gpu_memory", True, detail), source


def check_cuda_version(report, min_cuda: str | None) -> Check:
    """The driver supports ``min_cuda``; with no minimum, the version is reported only."""
    have = report.cuda_version
    if min_cuda is None:
        return Check("cuda_version", True, f"the driver supports CUDA {have or 'unknown'}, no minimum set")
    if have is None:
        return Check(
            "cuda_version",
            False,
            f"nvidia-smi's header shows no CUDA version; CUDA {min_cuda} or newer required",
            f"Install a driver whose header reads CUDA Version {min_cuda} or newer (CUDA 12.8 came with the "
            "R570 branch; GB10 ships R580 with CUDA 13.0).",
        )
    if version_at_least(have, min_cuda):
        return Check("cuda_version", True, f"the driver supports CUDA {have}, {min_cuda} required")
    return Check(
        "cuda_version",
        False,
        f"the driver supports CUDA {have}, {min_cuda} required (driver {report.driver_version or '?'})",
        f"Upgrade the NVIDIA driver to a branch that supports CUDA {min_cuda} (12.8 came with R570); "
        "Blackwell GPUs and vLLM's CUDA wheels need it.",
    )
