# -*- coding: utf-8 -*-
# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A vLLM server's boot log: the latest boot's ``non-default args`` and version.

vLLM 0.9 and later log ``non-default args: {...}`` (a dict repr, read with
:func:`~pyrepr.parse_repr`) at start-up; the version comes from the banner
before it, or the ``LLM engine (vX)`` line after it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ansible.module_utils.ansi import strip_ansi
from ansible.module_utils.pyrepr import ReprError, parse_repr
from ansible.module_utils.secrets_mask import mask_value
from ansible.module_utils.vllm_flag_errors import SourceError
from ansible.module_utils.vllm_help import FlagTable
from ansible.module_utils.vllm_settings import SOURCE_LOG, Setting, Unknown
from ansible.module_utils.vllm_values import format_value


_ARGS_MARK = "non-default args: "
_LOG_VERSION_RES = (
    re.compile(r"vLLM(?: API)? server version\s+v?(\d+\.\d+[^\s,]*)"),
    re.compile(r"(?:^|[\]█▀▄])\s*version\s+v?(\d+\.\d+[^\s,]*)"),
)
_ENGINE_VERSION_RE = re.compile(r"LLM engine \(v(\d+\.\d+[^)\s]*)\)")


@dataclass
class BootLog:
    path: str
    args: dict[str, Any] | None
    args_line: int | None
    version: str | None


def _line_version(line: str) -> str | None:
    for regex in _LOG_VERSION_RES:
        m = regex.search(line)
        if m:
            return m.group(1)
    return None


def parse_boot_log_lines(lines, path: str = "<log>") -> BootLog:
    """The latest boot's ``non-default args`` dict and version.

    The version is the last banner line at or before that args line; failing
    that, the first ``LLM engine (vX)`` line after it."""
    banner_version = None
    args_text, args_line, args_version, engine_after = None, None, None, None
    for number, raw in enumerate(lines, 1):
        line = strip_ansi(raw.rstrip("\n"))
        version = _line_version(line)
        if version:
            banner_version = version
        idx = line.find(_ARGS_MARK)
        if idx >= 0:
            args_text, args_line = line[idx + len(_ARGS_MARK):].strip(), number
            args_version, engine_after = banner_version, None
            continue
        if engine_after is None:
            m = _ENGINE_VERSION_RE.search(line)
            if m:
                engine_after = m.group(1)
    args = None
    if args_text is not None:
        try:
            args = parse_repr(args_text)
        except ReprError as exc:
            raise SourceError(
                f"cannot read the non-default args on line {args_line} of {path}: {exc}") from None
        if not isinstance(args, dict):
            raise SourceError(f"the non-default args on line {args_line} of {path} are not a dict")
    version = (args_version or engine_after) if args_line else (banner_version or engine_after)
    return BootLog(path=path, args=args, args_line=args_line, version=version)


def parse_boot_log(path: str) -> BootLog:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return parse_boot_log_lines(handle, path)
    except FileNotFoundError:
        raise SourceError(f"log_path {path} does not exist; give the vLLM server's boot log") from None
    except IsADirectoryError:
        raise SourceError(f"log_path {path} is a directory; give the boot log file") from None
    except PermissionError:
        raise SourceError(f"log_path {path} is not readable by this user; use become") from None


def log_settings(boot: BootLog, table: FlagTable) -> tuple[dict[str, Setting], list[Unknown]]:
    settings: dict[str, Setting] = {}
    unknown: list[Unknown] = []
    for key, value in (boot.args or {}).items():
        dest = str(key)
        evidence = f"'{dest}': {format_value(mask_value(dest, value))} in the boot log's non-default args"
        if dest in table.flags:
            settings[dest] = Setting(dest, mask_value(dest, value), evidence, SOURCE_LOG)
        else:
            unknown.append(Unknown("--" + dest.replace("_", "-"), SOURCE_LOG, evidence))
    return settings, unknown
