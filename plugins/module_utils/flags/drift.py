# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Drift between a systemd unit's configured ExecStart and the process it runs.

:func:`running_unit` reads the unit (it must be loaded and running);
:func:`compare_unit` compares its ExecStart with the running command line by
parsed value, so order and spelling are not drift.

:func:`split_exec_argv` and :func:`compare_unit` never raise;
:func:`running_unit` raises :class:`~flags.errors.SourceError` only.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from ansible.module_utils.flags.cmdline import ParsedCmdline, parse_cmdline
from ansible.module_utils.flags.errors import CmdlineError, SourceError
from ansible.module_utils.flags.help import FlagTable
from ansible.module_utils.flags.secrets_mask import mask_argv
from ansible.module_utils.flags.values import JsonBrackets
from ansible.module_utils.host.systemd import UnitInfo, unit_info
from ansible.module_utils.shared.pyrepr import MAX_DEPTH


def _scan_json_words(tokens: list[str], start: int, ends: dict[int, int | None]) -> int:
    """Where the JSON word that begins at ``tokens[start]`` ends: the token
    where its outermost bracket closes (strings skipped), or None when it never
    closes or nests deeper than MAX_DEPTH. Fills ``ends`` for ``start`` and for
    every later bracket word met outside a string (the same scan answers for
    them), and returns the characters scanned."""
    depth = 0
    scanned = 0
    scan = JsonBrackets()
    open_words: list[list[int]] = []    # [token, depth before it, deepest depth inside]
    for j in range(start, len(tokens)):
        token = tokens[j]
        scanned += len(token) + 1
        if not scan.in_string and token[:1] in "{[" and j not in ends:
            open_words.append([j, depth, depth])
        for c in scan.brackets(token):
            if c in "[{":
                depth += 1
                if open_words and depth > open_words[-1][2]:
                    open_words[-1][2] = depth
            else:
                depth -= 1
                if open_words and depth == open_words[-1][1]:
                    word, before, deepest = open_words.pop()
                    ends[word] = j if deepest - before <= MAX_DEPTH else None
                    if not open_words:
                        return scanned
                    open_words[-1][2] = max(open_words[-1][2], deepest)
    for word, _before, _deepest in open_words:
        ends[word] = None
    return scanned


def _rejoin_json(tokens: list[str]) -> list[str]:
    """systemd's argv[] is space-joined; glue back JSON words split at spaces.

    A word that opens a bracket is glued up to the token where that bracket
    closes, when the glued text is JSON (no later token could make it JSON).
    Scanning stops, leaving the rest as split, past eight times the line's
    length and 64 KiB: only a contrived line of unclosed brackets and escaped
    quotes gets there."""
    out: list[str] = []
    ends: dict[int, int | None] = {}
    budget = 8 * sum(len(t) + 1 for t in tokens) + 65536
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token[:1] in "{[":
            if i not in ends and budget > 0:
                budget -= _scan_json_words(tokens, i, ends)
            end = ends.get(i)
            if end is not None and end > i:
                candidate = " ".join(tokens[i:end + 1])
                try:
                    json.loads(candidate)       # the scan kept it within MAX_DEPTH
                except (ValueError, RecursionError):
                    pass
                else:
                    token, i = candidate, end
        out.append(token)
        i += 1
    return out


def split_exec_argv(exec_argv: str) -> list[str]:
    """The words of systemd's space-joined ``argv[]``, JSON words glued back."""
    if not isinstance(exec_argv, str):
        return []
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


_VAR_RE = re.compile(r"\$\{\w+\}|\$\w+")


def _expands_to(template: str, text: str) -> bool:
    """Could systemd's expansion of ExecStart words like ${MODEL} or $TP (any
    text each; ``$$`` is a ``$``) give ``text``? Literal parts are found in
    order, leftmost first: a regex of one ``.*?`` per variable backtracks
    exponentially when it does not match."""
    parts = [""]            # literal texts; a variable between each two
    for n, chunk in enumerate(template.split("$$")):
        pieces = _VAR_RE.split(chunk)
        parts[-1] += ("$" if n else "") + pieces[0]
        parts.extend(pieces[1:])
    if len(parts) == 1:
        return parts[0] == text
    first, *middle, last = parts
    if len(text) < len(first) + len(last) or not text.startswith(first) or not text.endswith(last):
        return False
    at, end = len(first), len(text) - len(last)
    for part in middle:
        found = text.find(part, at, end)
        if found < 0:
            return False
        at = found + len(part)
    return True


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
        exact = _expands_to(" ".join(configured.args), " ".join(running.args))
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
