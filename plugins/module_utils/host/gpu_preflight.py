"""Preflight checks of one engine host, one verdict per check: the verdict's shape,
the module's options, and the report.

Each check is a :class:`Check` (``{check, ok, detail, hint}`` as a dict, the
DeepOps shape: one JSON verdict per check), built from evidence the
``gpu_preflight_info`` module gathers and, for the clock, from every host's
sample (the ``gpu_preflight_clock_skew`` filter). The module's options are
checked by :func:`validate_options` first. The checks live by concern beside
this file: :mod:`preflight_gpu` (``nvidia-smi``, ``/proc/meminfo``),
:mod:`preflight_network` (``ip -o -4 addr``, ``ip -o link``),
:mod:`preflight_ports` (``ss -Htlnp``, ``/proc/<pid>/cgroup``),
:mod:`preflight_disk` and :mod:`preflight_clock`; :func:`summarize`,
:func:`render_report` and :func:`check_from_dict` make the report.

Standard-library only: no AnsibleModule, and of the project's other
module_utils only ``shared/versions.py`` (standard-library only too). Everything is
pure except :func:`preflight_disk.check_disk_path`, which measures the filesystem
(``statvfs``) and walks what is already staged there.
The GPU checks take the ``SmiReport`` of :mod:`nvidia_smi`.

Hints name the module's options (``min_gpu_memory_gib``, ``ports``...); a role
that sets them from its own variables says which in its own messages.

The parsers read text a host printed and trust none of it: a figure is ASCII
digits of a length the program can print (``int()`` and ``\\d`` accept
Arabic-Indic digits, ``isdigit()`` superscripts, and ``int()`` refuses 4,300
digits), an address is one :mod:`ipaddress` accepts, and a line is what the
program ends with ``\\n`` (:func:`program_lines`; not what ``str.splitlines`` also
splits at, such as U+2028 in a process name). What a line does not hold is skipped;
only ``parse_meminfo`` (no MemTotal) and ``parse_ss`` (not ``ss`` output)
raise, and only :class:`PreflightError`.
"""
from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from ansible.module_utils.shared.versions import version_tuple

GIB = 1024 ** 3

# The checks in report order; the GPU ones are skipped with accelerator=cpu.
GPU_CHECKS = ("gpu_driver", "gpu_count", "gpu_memory", "cuda_version")


class PreflightError(Exception):
    """Evidence that could not be read (a malformed /proc file or command output)."""


class PreflightOptionError(ValueError):
    """An option value the checks cannot use; its text is the module's failure message."""


@dataclass
class Check:
    """One verdict. ``hint`` says what to do; it is empty when ``ok``."""

    check: str
    ok: bool
    detail: str
    hint: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def gib_text(num_bytes: float) -> str:
    """GiB to one decimal; under 0.1 GiB in MiB, so a small disk does not read as empty."""
    if 0 < num_bytes < GIB / 10:
        return f"{num_bytes / 1024 ** 2:.1f} MiB"
    return f"{num_bytes / GIB:.1f} GiB"


def number_text(value: float) -> str:
    return f"{value:g}"


def program_lines(text) -> list:
    """``text`` split where a program ends its lines (``\\n``, a CRLF's ``\\r`` dropped);
    no lines for anything but a string."""
    if not isinstance(text, str):
        return []
    return [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]


def shown(value, quote: bool = False) -> str:
    """``value`` for a message: never raises (``str()`` of a 4,301-digit int does) and stays short;
    with ``quote``, a string is quoted so that "80" does not read as the number 80."""
    if value is None or isinstance(value, bool):
        return str(value)
    if isinstance(value, int) and abs(value) >= 10 ** 30:
        return "a number of more than 30 digits"
    if not isinstance(value, (str, int, float)):
        return f"a {type(value).__name__}"
    text = str(value)
    text = text if len(text) <= 80 else text[:77] + "..."
    return f"'{text}'" if quote and isinstance(value, str) else text


# ---- options ---------------------------------------------------------------

_DOTTED_QUAD = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}")


def is_ipv4(value) -> bool:
    """A dotted-quad IPv4 address (no prefix length, no host name) that :mod:`ipaddress`
    accepts too, so the subnet check can use it; False for anything else, a non-string included."""
    if not isinstance(value, str) or not _DOTTED_QUAD.fullmatch(value):
        return False
    try:
        ipaddress.IPv4Address(value)  # refuses 256 and, from Python 3.9.5, leading zeros
    except ValueError:
        return False
    return True


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    """An int or float within float's range (not a bool): math.isfinite() of a larger int raises."""
    return (isinstance(value, float) or _is_int(value) and abs(value) < 2 ** 1023) and not isinstance(value, bool)


def _is_list(value) -> bool:
    return isinstance(value, (list, tuple))


def validate_options(*, min_gpus: int, ports, min_cuda_version: str | None = None, address: str | None = None,
                     peer_addresses=(), service_address: str | None = None, min_gpu_memory_gib: float = 0,
                     min_disk_gib: float | None = None, controller_time: float | None = None) -> None:
    """Raise :class:`PreflightOptionError` for the first option value the checks cannot use.

    Raises nothing else, whatever the values' types (the module's argspec
    converts them; a caller that skips it gets the same messages). A size or
    a time must be a finite number: the argspec's float takes "inf", "nan"
    and "1e999", with which every comparison fails or passes whatever the
    host has."""
    for name, value in (("min_gpu_memory_gib", min_gpu_memory_gib), ("min_disk_gib", min_disk_gib)):
        if value is not None and not (_is_number(value) and 0 <= value < math.inf):
            raise PreflightOptionError(f"{name} must be a number of GiB, 0 or more, got {shown(value, quote=True)}")
    if controller_time is not None and not (_is_number(controller_time) and math.isfinite(controller_time)):
        raise PreflightOptionError(
            f"controller_time must be epoch seconds (now().timestamp()), got {shown(controller_time, quote=True)}")
    if min_cuda_version is not None:
        try:
            readable = isinstance(min_cuda_version, str) and min_cuda_version.isascii()
            version_tuple(min_cuda_version if readable else None)
        except ValueError:
            raise PreflightOptionError(
                f"min_cuda_version must be a version such as 12.8, got '{shown(min_cuda_version)}'") from None
    if not _is_int(min_gpus) or min_gpus < 0:
        raise PreflightOptionError(f"min_gpus must be 0 or more, got {shown(min_gpus, quote=True)}")
    if not _is_list(ports):
        raise PreflightOptionError(f"ports must be a list of port numbers, got {shown(ports)}")
    bad = [shown(x, quote=True) for x in ports if not (_is_int(x) and 1 <= x <= 65535)]
    if bad:
        raise PreflightOptionError(f"ports must be between 1 and 65535, got {', '.join(bad)}")
    if address is not None and not is_ipv4(address):
        raise PreflightOptionError(f"address must be an IPv4 address, got '{shown(address)}'")
    if service_address is not None and not is_ipv4(service_address):
        raise PreflightOptionError(f"service_address must be an IPv4 address, got '{shown(service_address)}'")
    if not _is_list(peer_addresses):
        raise PreflightOptionError(f"peer_addresses must be a list of IPv4 addresses, got {shown(peer_addresses)}")
    bad = [shown(a) for a in peer_addresses if not is_ipv4(a)]
    if bad:
        raise PreflightOptionError(f"peer_addresses must be IPv4 addresses, got '{', '.join(bad)}'")


# ---- evidence that could not be gathered -----------------------------------

def tool_missing(check: str, tool: str, package: str = "iproute2") -> Check:
    """``check`` failed because ``tool`` is not on the host."""
    return Check(check, False, f"{tool} not found", f"Install {package}.")


def command_failed(check: str, command: str, rc: int, err: str) -> Check:
    """``check`` failed because ``command`` (as the operator would type it) exited ``rc``."""
    return Check(check, False, f"`{command}` failed (rc={rc}): {(err or '').strip()[:200]}",
                 "Run it on the host and fix what it reports.")


# ---- the verdict -----------------------------------------------------------

def summarize(checks) -> tuple:
    """``(ok, failed_check_names, message)``; the message lists every failure."""
    failed = [c for c in checks if not c.ok]
    if not failed:
        return True, [], f"all {len(checks)} preflight checks passed"
    lines = [f"{len(failed)} of {len(checks)} preflight checks failed:"]
    for c in failed:
        lines.append(f"- {c.check}: {c.detail}")
        if c.hint:
            lines.append(f"  fix: {c.hint}")
    return False, [c.check for c in failed], "\n".join(lines)


def render_report(checks) -> list:
    """One line per check (``PASS``/``FAIL``), a ``fix:`` line under each failure."""
    lines = []
    for c in checks:
        lines.append(f"{'PASS' if c.ok else 'FAIL'} {c.check}: {c.detail}")
        if not c.ok and c.hint:
            lines.append(f"     fix: {c.hint}")
    return lines


def check_from_dict(data: dict) -> Check:
    """A check back from its dict (as registered by the module).

    Raises KeyError when ``check`` or ``ok`` is missing and TypeError for
    anything else that is not a check's dict (the report filters catch both):
    ``ok`` must be a boolean, since the string "false" would read as passed.
    """
    if not isinstance(data, Mapping):
        raise TypeError(f"a check is a dict, got {shown(data)}")
    name, ok = data["check"], data["ok"]
    if not isinstance(name, str):
        raise TypeError(f"a check's name is a string, got {shown(name, quote=True)}")
    if not isinstance(ok, bool):
        raise TypeError(f"check {name[:80]}: ok must be true or false, got {shown(ok, quote=True)}")
    text = {}
    for key in ("detail", "hint"):
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            raise TypeError(f"check {name[:80]}: {key} must be a string, got {shown(value, quote=True)}")
        text[key] = value or ""
    return Check(name, ok, text["detail"], text["hint"])
