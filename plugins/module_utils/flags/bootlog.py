# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A vLLM server's boot log: the latest boot's ``non-default args`` and version.

vLLM 0.9 and later log ``non-default args: {...}`` (a dict repr, read with
:func:`~shared.pyrepr.parse_repr`) at start-up; the version comes from the banner
before it, or the ``LLM engine (vX)`` line after it.

Lines are taken apart by :mod:`log.lines`, as the KV cache scan does (one
reading of vLLM's log prefix for both): each kind counts only at the start of a message logged by
the file that prints it, so an args line or a banner quoted inside a logged
prompt is never read.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ansible.module_utils.flags.errors import SourceError
from ansible.module_utils.flags.help import FlagTable
from ansible.module_utils.flags.secrets_mask import mask_value
from ansible.module_utils.flags.settings import SOURCE_LOG, Setting, Unknown
from ansible.module_utils.flags.values import format_value
from ansible.module_utils.log.ansi import strip_ansi
from ansible.module_utils.log.lines import LogLines, boot_marker
from ansible.module_utils.shared.pyrepr import ReprError, parse_repr

_ARGS_MARK = "non-default args: "
# A line longer than this is read up to it: one newline-free blob cannot grow
# memory without bound, and no real args line comes near it.
MAX_LINE = 1 << 20


@dataclass
class BootLog:
    path: str
    args: dict[str, Any] | None
    args_line: int | None
    version: str | None


def parse_boot_log_lines(lines, path: str = "<log>") -> BootLog:
    """The latest boot's ``non-default args`` dict and version.

    The version is the last banner line at or before that args line; failing
    that, the first ``LLM engine (vX)`` line after it."""
    reader = LogLines()
    banner_version = None
    args_text, args_line, args_version, engine_after = None, None, None, None
    for number, raw in enumerate(lines, 1):
        # tqdm redraws with a bare CR; each segment is its own line.
        for seg in strip_ansi(raw[:MAX_LINE].rstrip("\r\n")).split("\r"):
            line = reader.read(seg)
            mark = boot_marker(line) if line is not None else None
            if mark is None:
                continue
            kind, version = mark
            if kind == "banner":
                banner_version = version
            elif kind == "args" and line.message.startswith(_ARGS_MARK):
                args_text, args_line = line.message[len(_ARGS_MARK):].strip(), number
                args_version, engine_after = banner_version, None
            elif kind == "engine" and engine_after is None:
                engine_after = version
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


def _read_lines(handle):
    """The lines of ``handle``, each cut at MAX_LINE characters (the rest of a
    longer line is skipped, so line numbers stay those of the file)."""
    while True:
        line = handle.readline(MAX_LINE)
        if not line:
            return
        yield line
        while not line.endswith("\n"):
            line = handle.readline(MAX_LINE)
            if not line:
                return


def parse_boot_log(path: str) -> BootLog:
    try:
        handle = open(path, encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise SourceError(f"log_path {path} does not exist; give the vLLM server's boot log") from None
    except IsADirectoryError:
        raise SourceError(f"log_path {path} is a directory; give the boot log file") from None
    except PermissionError:
        raise SourceError(f"log_path {path} is not readable by this user; use become") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise SourceError(f"cannot open log_path {path}: {getattr(exc, 'strerror', None) or exc}") from None
    with handle:
        try:
            return parse_boot_log_lines(_read_lines(handle), path)
        except OSError as exc:
            raise SourceError(f"cannot read log_path {path}: {exc.strerror or exc}") from None


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
