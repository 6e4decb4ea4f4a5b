# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The flag table of ``vllm serve --help=all``.

:func:`parse_help` turns that output into a :class:`FlagTable` of
:class:`Flag` entries: every option string, nargs, default, choices and the
value kind, so a command line can be read the way vLLM's
``FlexibleArgumentParser`` (an ``argparse`` subclass) reads it.
:func:`normalise_option` and :func:`is_option` are argparse's own rules for
option words.

Whatever the text, :func:`parse_help` returns a table or raises
:class:`~flags.errors.HelpTextError`; a default or a choices list that is
no literal (nested deeper than :data:`~shared.pyrepr.MAX_DEPTH`, a bad number or
escape, digits of another script) stays text.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from ansible.module_utils.flags.errors import HelpTextError
from ansible.module_utils.shared.pyrepr import MAX_NUMBER_CHARS, ReprError, parse_repr


@dataclass(frozen=True)
class Flag:
    """One argparse action as ``--help=all`` shows it."""

    dest: str
    option_strings: tuple[str, ...]
    negative_strings: tuple[str, ...] = ()
    nargs: str | None = None          # None: one value; "0", "?", "+", "*"
    default: Any = None
    default_known: bool = False
    choices: tuple[str, ...] | None = None
    kind: str = "unknown"             # bool, int, float, str, json, list, unknown
    human_int: bool = False           # accepts 1k / 2M / 25.6k
    positional: bool = False
    help: str = ""

    @property
    def boolean_optional(self) -> bool:
        """True for ``--x, --no-x`` (argparse.BooleanOptionalAction)."""
        return bool(self.negative_strings)

    @property
    def option(self) -> str:
        """The spelling used in messages: the first long option."""
        for opt in self.option_strings:
            if opt.startswith("--"):
                return opt
        return self.option_strings[0] if self.option_strings else self.dest


@dataclass
class FlagTable:
    flags: dict[str, Flag]
    options: dict[str, tuple[Flag, bool]]   # option string -> (flag, negative form)
    aliases: dict[str, str] = field(default_factory=dict)

    def resolve(self, name: str) -> tuple[Flag | None, bool]:
        """Find a flag by dest (``tensor_parallel_size``) or any spelling
        (``--tensor-parallel-size``, ``tensor-parallel-size``, ``-tp``).
        Returns ``(flag, negative)``; ``(None, False)`` when unknown."""
        name = str(name).strip()
        if name.startswith("-"):
            opt = normalise_option(name)
            if opt in self.options:
                return self.options[opt]
            return None, False
        dest = name.replace("-", "_")
        dest = self.aliases.get(dest, dest)
        return self.flags.get(dest), False

    def match_option(self, opt: str) -> tuple[Flag | None, bool, list[str]]:
        """Exact option, else a unique ``--`` prefix as argparse's allow_abbrev.
        Returns ``(flag, negative, candidates)``; several candidates mean ambiguous."""
        if opt in self.options:
            flag, neg = self.options[opt]
            return flag, neg, [opt]
        if opt.startswith("--") and len(opt) > 2:
            hits = sorted(o for o in self.options if o.startswith(opt))
            if len(hits) == 1:
                flag, neg = self.options[hits[0]]
                return flag, neg, hits
            return None, False, hits
        return None, False, []


def normalise_option(opt: str) -> str:
    """FlexibleArgumentParser turns ``--a_b`` into ``--a-b`` (up to the first '.')."""
    if opt.startswith("--"):
        head, dot, tail = opt[2:].partition(".")
        return "--" + head.replace("_", "-") + dot + tail
    return opt


def is_option(token: str) -> bool:
    """argparse: a leading '-' makes an option unless it reads as a negative number."""
    if not token.startswith("-") or token == "-":
        return False
    return not re.fullmatch(r"-\d+(\.\d*)?([eE][-+]?\d+)?|-\.\d+", token)


_ENTRY_RE = re.compile(r"^  (-{1,2}[A-Za-z0-9][^\s,]*(?:.*?))(?:\s{2,}(\S.*))?$")
_POSITIONAL_RE = re.compile(r"^  ([A-Za-z_][\w-]*)(?:\s{2,}(\S.*))?$")
_JSON_MARK = "Should either be a valid JSON string or JSON keys passed individually"
_UPPER_METAVAR = re.compile(r"^[A-Z][A-Z0-9_]*$")
_ASCII_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
# str() of an int or a float, in ASCII digits (int() also reads other scripts' digits)
_INT_DEFAULT_RE = re.compile(r"[-+]?[0-9]+", re.ASCII)
_FLOAT_DEFAULT_RE = re.compile(r"[-+]?([0-9]+\.[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?|[-+]?[0-9]+[eE][-+]?[0-9]+",
                               re.ASCII)


def _join_help(lines: list[str]) -> str:
    """Undo argparse's wrapping; a line that ends in 'word-' was split at a hyphen."""
    out: list[str] = []
    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        if out and line[:1].isalpha() and out[-1][-1:] == "-" and out[-1][-2:-1] in _ASCII_LETTERS:
            out.append(line)
        elif out:
            out.append(" " + line)
        else:
            out.append(line)
    return "".join(out)


def _parse_default(text: str) -> Any:
    """A default as argparse prints it (``str(default)``); text when it is no literal."""
    text = text.strip()
    if text in ("None", "True", "False"):
        return {"None": None, "True": True, "False": False}[text]
    if len(text) <= MAX_NUMBER_CHARS:
        try:
            if _INT_DEFAULT_RE.fullmatch(text):
                return int(text)
            if _FLOAT_DEFAULT_RE.fullmatch(text):
                value = float(text)
                return value if math.isfinite(value) else text
        except ValueError:      # int() below Python's digit limit (PYTHONINTMAXSTRDIGITS)
            return text
    if text[:1] in "[{(":
        try:
            return parse_repr(text)
        except ReprError:
            return text
    return text


def _parse_metavar(metavar: str) -> tuple[str | None, str]:
    """Return (nargs, first metavar word) from argparse's invocation format."""
    if not metavar:
        return "0", ""
    if metavar.startswith("[") and metavar.endswith(" ...]"):
        return "*", metavar[1:].split(" ", 1)[0]
    if metavar.startswith("[") and metavar.endswith("]") and not metavar.startswith("['"):
        return "?", metavar[1:-1]
    # "X [X ...]", found by length: a regex with two lazy groups is quadratic
    half = (len(metavar) - len(" [ ...]")) // 2
    if half > 0 and metavar == f"{metavar[:half]} [{metavar[:half]} ...]":
        return "+", metavar[:half]
    return None, metavar


def _parse_choices(metavar: str) -> tuple[str, ...] | None:
    if metavar.startswith("{") and metavar.endswith("}"):
        return tuple(c for c in metavar[1:-1].split(","))
    if metavar.startswith("['") and metavar.endswith("]"):
        try:
            return tuple(str(c) for c in parse_repr(metavar))
        except ReprError:
            return None
    return None


def _infer_kind(nargs, default, default_known, choices, help_text) -> str:
    if nargs == "0":
        return "bool"
    if nargs in ("+", "*"):
        return "list"
    if _JSON_MARK in help_text:
        return "json"
    if choices:
        real = [c for c in choices if c != "None"]
        if real and all(re.fullmatch(r"-?[0-9]+", c) for c in real):
            return "int"
        return "str"
    if "human-readable" in help_text:
        return "int"
    if default_known and default is not None:
        if isinstance(default, bool):
            return "bool"
        if isinstance(default, int):
            return "int"
        if isinstance(default, float):
            return "float"
        if isinstance(default, (dict, list, tuple)):
            return "json"
        return "str"
    return "unknown"


def _build_flag(invocation: str, help_lines: list[str], positional: bool) -> Flag | None:
    help_text = _join_help(help_lines)
    default, default_known = None, False
    idx = help_text.rfind("(default:")
    if idx >= 0 and help_text.endswith(")"):
        default = _parse_default(help_text[idx + len("(default:"):-1])
        default_known = True
        help_text = help_text[:idx].rstrip()

    if positional:
        dest = invocation.replace("-", "_")
        return Flag(dest=dest, option_strings=(), nargs="?", default=default,
                    default_known=default_known, kind="str", positional=True, help=help_text)

    parts = re.split(r",\s+(?=-)", invocation)
    opts, metavar = [], ""
    for part in parts:
        opt, _, mv = part.partition(" ")
        opts.append(opt)
        metavar = metavar or mv.strip()
    if "--help" in opts:
        return None
    nargs, first_mv = _parse_metavar(metavar)
    choices = _parse_choices(first_mv)

    negatives = tuple(o for o in opts if nargs == "0" and o.startswith("--no-")
                      and "--" + o[len("--no-"):] in opts)
    positives = tuple(o for o in opts if o not in negatives)
    longs = [o for o in positives if o.startswith("--")]
    dest = (longs[0] if longs else positives[0]).lstrip("-").replace("-", "_")
    # argparse's default metavar is dest.upper(); a different one means dest= was set
    if _UPPER_METAVAR.match(first_mv) and first_mv.lower() != dest:
        dest = first_mv.lower()
    kind = _infer_kind(nargs, default, default_known, choices, help_text)
    return Flag(dest=dest, option_strings=positives, negative_strings=negatives, nargs=nargs,
                default=default, default_known=default_known, choices=choices, kind=kind,
                human_int="human-readable" in help_text, help=help_text)


def parse_help(text: str) -> FlagTable:
    """Parse ``vllm serve --help=all`` (or the api_server's ``--help``)."""
    if not isinstance(text, str) or not text.strip():
        raise HelpTextError("the help text is empty; pass the output of `vllm serve --help=all`")
    lines = [ln.rstrip() for ln in text.replace("\r\n", "\n").split("\n")]
    looks_like_vllm = any(
        re.match(r"usage: (vllm serve|api_server\.py|python -m vllm)", ln) for ln in lines[:20]
    ) or "--tensor-parallel-size" in text
    if not looks_like_vllm:
        first = next((ln for ln in lines if ln.strip()), "")[:80]
        raise HelpTextError(
            "the help text does not look like `vllm serve --help=all` "
            f"(it starts with {first!r}); pass that command's output")

    entries: list[tuple[str, list[str], bool]] = []
    section = ""
    current: tuple[str, list[str], bool] | None = None
    for line in lines:
        if not line.strip():
            current = None
            continue
        if not line[0].isspace():
            section = line.rstrip(":").strip().lower()
            current = None
            continue
        m = _ENTRY_RE.match(line)
        if m:
            current = (m.group(1).strip(), [m.group(2) or ""], False)
            entries.append(current)
            continue
        if section == "positional arguments":
            m = _POSITIONAL_RE.match(line)
            if m:
                current = (m.group(1), [m.group(2) or ""], True)
                entries.append(current)
                continue
        if current is not None:
            current[1].append(line)

    flags: dict[str, Flag] = {}
    options: dict[str, tuple[Flag, bool]] = {}
    aliases: dict[str, str] = {}
    for invocation, help_lines, positional in entries:
        flag = _build_flag(invocation, help_lines, positional)
        if flag is None:
            continue
        flags[flag.dest] = flag
        for opt in flag.option_strings:
            options[opt] = (flag, False)
            alias = opt.lstrip("-").replace("-", "_")
            if opt.startswith("--") and alias != flag.dest:
                aliases[alias] = flag.dest
        for opt in flag.negative_strings:
            options[opt] = (flag, True)

    if "tensor_parallel_size" not in flags:
        if any(ln.strip() == "Config Groups:" for ln in lines):
            raise HelpTextError(
                "the help text is `vllm serve --help` (config groups only), which lists no "
                "flags; pass the output of `vllm serve --help=all`")
        raise HelpTextError(
            "the help text lists no --tensor-parallel-size, so it is not the full "
            "`vllm serve --help=all` output; pass that command's output")
    return FlagTable(flags=flags, options=options, aliases=aliases)
