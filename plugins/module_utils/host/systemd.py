# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ask for and read ``systemctl show`` output.

``systemctl show -p A -p B UNIT`` prints one ``KEY=VALUE`` line per property.
An exec property is printed in systemd's structured form (systemd 252)::

    ExecStart={ path=/opt/vllm/venv/bin/vllm ; argv[]=/opt/vllm/venv/bin/vllm serve /m -tp 2 ;
                ignore_errors=no ; start_time=[...] ; stop_time=[...] ; pid=4242 ; code=... ; status=... }

with argv joined by single spaces and unquoted. Each caller keeps its own
message for a unit that is missing or not running; this file only builds the
command (:func:`show_argv`) and reads what it prints.

Nothing here raises: any text (cut, with NULs, CRs, or non-UTF-8 read with
replacement) gives a value, and what cannot be a property, a pid or a stamp
is absent, 0 or None.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_PID_RE = re.compile(r"[0-9]{1,10}", re.ASCII)         # Linux's pid_max is at most 2**22
_STAMP_RE = re.compile(r"@[0-9]{1,12}(\.[0-9]{1,9})?", re.ASCII)


@dataclass
class UnitInfo:
    """A unit's load state, main process and configured command."""

    load_state: str
    main_pid: int
    exec_path: str | None
    exec_argv: str | None     # systemd joins argv with single spaces, unquoted


def show_argv(systemctl: str, unit: str, properties, *, unix_time: bool = False,
              end_of_options: bool = False) -> list[str]:
    """``systemctl show`` of ``properties`` of ``unit`` as argv: ``--timestamp=unix``
    with ``unix_time`` (stamps as ``@N``, for :func:`active_since`), ``--`` before the
    unit with ``end_of_options``."""
    argv = [systemctl, "show"] + (["--timestamp=unix"] if unix_time else [])
    for name in properties:
        argv += ["-p", name]
    return argv + (["--", unit] if end_of_options else [unit])


def parse_show(text: str) -> dict[str, str]:
    """``KEY=VALUE`` lines as a dict; the first of a repeated key wins.

    systemctl ends each property with a newline, so only a newline ends a line
    (a CR or a Unicode line break inside a value stays in it)."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "replace")
    if not isinstance(text, str):
        return {}
    props: dict[str, str] = {}
    for line in text.split("\n"):
        key, eq, value = line.partition("=")
        key = key.strip()
        if eq and key and key not in props:
            props[key] = value.strip()
    return props


def active_since(props: dict[str, str]) -> float | None:
    """``ActiveEnterTimestamp`` of ``systemctl show --timestamp=unix`` as epoch
    seconds, or None when the unit is not active or the stamp is not ``@N``."""
    stamp = props.get("ActiveEnterTimestamp", "")
    if props.get("ActiveState") != "active" or not isinstance(stamp, str) or not _STAMP_RE.fullmatch(stamp):
        return None
    return float(stamp[1:])


def main_pid(props: dict[str, str]) -> int:
    """``MainPID`` as an int; 0 (no main process) when absent or not a number
    in ASCII digits (int() would read ``٤٢`` as 42, another process)."""
    value = props.get("MainPID", "")
    if not isinstance(value, str) or not _PID_RE.fullmatch(value):
        return 0
    return int(value)


def exec_command(value: str) -> tuple[str | None, str | None]:
    """``(path, argv)`` of the first command of an exec property; ``(None, None)``
    when it holds none."""
    if not isinstance(value, str):
        return None, None
    # str.find, not a regex with lazy groups: that is quadratic on a line of "{ path="
    start = value.find("{ path=")
    if start < 0:
        return None, None
    start += len("{ path=")
    argv_at = value.find(" ; argv[]=", start)
    if argv_at < 0:
        return None, None
    end = value.find(" ; ignore_errors=", argv_at + len(" ; argv[]="))
    if end < 0:
        return None, None
    return value[start:argv_at], value[argv_at + len(" ; argv[]="):end]


def unit_info(text: str) -> UnitInfo:
    """LoadState, MainPID and ExecStart of ``systemctl show -p MainPID -p ExecStart -p LoadState``."""
    props = parse_show(text)
    path, argv = exec_command(props.get("ExecStart", ""))
    return UnitInfo(load_state=props.get("LoadState", ""), main_pid=main_pid(props),
                    exec_path=path, exec_argv=argv)
