# -*- coding: utf-8 -*-
# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Drift between a systemd unit's configured ExecStart and the process it runs.

:func:`running_unit` reads the unit (it must be loaded and running);
:func:`compare_unit` compares its ExecStart with the running command line by
parsed value, so order and spelling are not drift.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from ansible.module_utils.secrets_mask import mask_argv
from ansible.module_utils.systemd import UnitInfo, unit_info
from ansible.module_utils.vllm_cmdline import ParsedCmdline, parse_cmdline
from ansible.module_utils.vllm_flag_errors import CmdlineError, SourceError
from ansible.module_utils.vllm_help import FlagTable


def _rejoin_json(tokens: list[str]) -> list[str]:
    """systemd's argv[] is space-joined; glue back JSON words split at spaces."""
    out: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token[:1] in "{[":
            for j in range(i, len(tokens)):
                candidate = " ".join(tokens[i:j + 1])
                try:
                    json.loads(candidate)
                except ValueError:
                    continue
                token, i = candidate, j
                break
        out.append(token)
        i += 1
    return out


def split_exec_argv(exec_argv: str) -> list[str]:
    return _rejoin_json([t for t in exec_argv.split(" ") if t != ""])


def running_unit(show: str, unit: str) -> UnitInfo:
    """The unit in ``systemctl show -p MainPID -p ExecStart -p LoadState`` output;
    SourceError unless it is loaded and has a main process."""
    info = unit_info(show)
    if info.load_state != "loaded":
        raise SourceError(
            f"unit {unit} not found (LoadState={info.load_state or 'unknown'}); check the name "
            f"with `systemctl list-unit-files '{unit}*'`")
    if info.main_pid <= 0:
        raise SourceError(f"unit {unit} has no running main process (MainPID={info.main_pid}); "
                          f"start it, or see `systemctl status {unit}`")
    return info


@dataclass
class Drift:
    drifted: bool
    details: list[str]


def _var_pattern(text: str) -> re.Pattern:
    """ExecStart words like ${MODEL} or $TP are expanded by systemd at start."""
    parts = re.split(r"(\$\{\w+\}|\$\w+)", text.replace("$$", "\0"))
    regex = "".join(".*?" if p.startswith("$") else re.escape(p).replace("\\\0", "\\$")
                    for p in parts)
    return re.compile(regex + r"\Z", re.S)


def compare_unit(running: ParsedCmdline, unit: UnitInfo, table: FlagTable) -> Drift:
    """Does the running process differ from the unit's configured ExecStart?

    The launcher word is compared by path (a bare ``vllm`` in the unit matches
    ``/usr/bin/vllm``), the arguments by parsed value, so order and spelling
    (``-tp 2`` versus ``--tensor-parallel-size=2``) are not drift.
    """
    if not unit.exec_argv:
        return Drift(True, ["the unit has no ExecStart"])
    tokens = split_exec_argv(unit.exec_argv)
    try:
        configured = parse_cmdline(tokens, table)
    except CmdlineError:
        return Drift(True, ["the unit's ExecStart is not a vLLM server: "
                            + " ".join(mask_argv(tokens, table))[:200]])
    run_launch = running.argv[running.launcher_index]
    cfg_launch = configured.argv[configured.launcher_index]
    details: list[str] = []
    same_launcher = (run_launch == cfg_launch or run_launch == unit.exec_path
                     or ("/" not in cfg_launch and os.path.basename(run_launch) == cfg_launch)
                     or running.form != "serve")
    if not same_launcher:
        details.append(f"launcher: unit {cfg_launch}, running {run_launch}")

    exact = " ".join(running.args) == " ".join(configured.args)
    if "$" in unit.exec_argv and not exact:
        exact = bool(_var_pattern(" ".join(configured.args)).match(" ".join(running.args)))
        if exact:
            return Drift(bool(details), details)
    if exact:
        return Drift(bool(details), details)

    for dest in sorted(set(configured.settings) | set(running.settings)):
        want = configured.settings.get(dest)
        have = running.settings.get(dest)
        if want is not None and "$" in str(want.value):
            continue
        if want is None:
            details.append(f"{dest}: not in the unit, running {have.evidence}")
        elif have is None:
            details.append(f"{dest}: unit {want.evidence}, not in the running process")
        elif want.value != have.value:
            details.append(f"{dest}: unit {want.evidence}, running {have.evidence}")
    run_unknown = sorted(u.evidence for u in running.unknown)
    cfg_unknown = sorted(u.evidence for u in configured.unknown)
    if run_unknown != cfg_unknown:
        details.append(f"unrecognised words: unit {cfg_unknown}, running {run_unknown}")
    return Drift(bool(details), details)


def drift_message(drift: Drift) -> str:
    return ("the running process differs from the unit's ExecStart: "
            + "; ".join(drift.details) + " ; restart the unit to apply it")
