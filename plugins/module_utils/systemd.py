# -*- coding: utf-8 -*-
# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read ``systemctl show`` output.

``systemctl show -p A -p B UNIT`` prints one ``KEY=VALUE`` line per property.
An exec property is printed in systemd's structured form (systemd 252)::

    ExecStart={ path=/opt/vllm/venv/bin/vllm ; argv[]=/opt/vllm/venv/bin/vllm serve /m -tp 2 ;
                ignore_errors=no ; start_time=[...] ; stop_time=[...] ; pid=4242 ; code=... ; status=... }

with argv joined by single spaces and unquoted. Each caller keeps its own
message for a unit that is missing or not running; this file only reads.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_EXEC_RE = re.compile(r"\{ path=(?P<path>.*?) ; argv\[\]=(?P<argv>.*?) ; ignore_errors=")


@dataclass
class UnitInfo:
    """A unit's load state, main process and configured command."""

    load_state: str
    main_pid: int
    exec_path: str | None
    exec_argv: str | None     # systemd joins argv with single spaces, unquoted


def parse_show(text: str) -> dict[str, str]:
    """``KEY=VALUE`` lines as a dict; the first of a repeated key wins."""
    props: dict[str, str] = {}
    for line in (text or "").splitlines():
        key, eq, value = line.partition("=")
        key = key.strip()
        if eq and key and key not in props:
            props[key] = value.strip()
    return props


def active_since(props: dict[str, str]) -> float | None:
    """``ActiveEnterTimestamp`` of ``systemctl show --timestamp=unix`` as epoch
    seconds, or None when the unit is not active or the stamp is not ``@N``."""
    stamp = props.get("ActiveEnterTimestamp", "")
    if props.get("ActiveState") != "active" or not re.fullmatch(r"@[0-9]{1,12}(\.[0-9]{1,9})?", stamp, re.ASCII):
        return None
    return float(stamp[1:])


def main_pid(props: dict[str, str]) -> int:
    """``MainPID`` as an int; 0 (no main process) when absent or not a number."""
    try:
        return int(props.get("MainPID", "0") or 0)
    except ValueError:
        return 0


def exec_command(value: str) -> tuple[str | None, str | None]:
    """``(path, argv)`` of the first command of an exec property; ``(None, None)``
    when it holds none."""
    m = _EXEC_RE.search(value or "")
    return (m.group("path"), m.group("argv")) if m else (None, None)


def unit_info(text: str) -> UnitInfo:
    """LoadState, MainPID and ExecStart of ``systemctl show -p MainPID -p ExecStart -p LoadState``."""
    props = parse_show(text)
    path, argv = exec_command(props.get("ExecStart", ""))
    return UnitInfo(load_state=props.get("LoadState", ""), main_pid=main_pid(props),
                    exec_path=path, exec_argv=argv)
