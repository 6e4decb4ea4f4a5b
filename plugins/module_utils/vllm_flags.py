# -*- coding: utf-8 -*-
# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read what a vLLM server runs with and compare it with what is wanted.

Pure logic for the ``vllm_flags_info`` module. Flag history comes from the
shared research notes (facts/vllm.md section 2).

Everything here is plain Python with no AnsibleModule: the module maps the
exceptions below to ``fail_json``.

* :func:`parse_help` turns ``vllm serve --help=all`` into a :class:`FlagTable`.
* :func:`parse_cmdline` reads a server command line against that table the way
  vLLM's ``FlexibleArgumentParser`` (an ``argparse`` subclass) would.
* :func:`parse_boot_log` finds the latest ``non-default args: {...}`` line and
  the version banner; :func:`parse_repr` reads that dict repr tolerantly.
* :func:`check` compares effective values with ``expect`` and ``forbid``.
* :func:`parse_systemctl_show` and :func:`compare_unit` find drift between a
  unit's ExecStart and its running MainPID.
"""
from __future__ import annotations

import ast
import json
import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Any


class VllmFlagsError(Exception):
    """Base of every error this module raises; the message is for operators."""


class HelpTextError(VllmFlagsError):
    """The text given as the flag table is not ``vllm serve --help=all``."""


class CmdlineError(VllmFlagsError):
    """The command line is not a vLLM server's."""


class SourceError(VllmFlagsError):
    """A source (pid, unit, boot log) could not be read."""


class ExpectError(VllmFlagsError):
    """``expect`` or ``forbid`` is malformed."""


class ReprError(VllmFlagsError):
    """A Python repr could not be read."""


# --------------------------------------------------------------------------
# Version history of the flags the toolkit relies on.
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class FlagHistory:
    dest: str
    option: str
    added_in: str
    citation: str


# Sources: /work/shared/facts/vllm.md section 2 (read from the released wheels).
FLAG_HISTORY: dict[str, FlagHistory] = {
    h.dest: h for h in (
        FlagHistory(
            "scheduler_reserve_full_isl", "--scheduler-reserve-full-isl", "0.19.0",
            "facts/vllm.md 2.1: absent in v0.18.0 config/scheduler.py; "
            "v0.19.0 engine/arg_utils.py:1250-1253; vllm-project/vllm PR 37307"),
        FlagHistory(
            "watermark", "--watermark", "0.24.0",
            "facts/vllm.md 2.2: absent in v0.23.0; v0.24.0 engine/arg_utils.py:1439; "
            "vllm-project/vllm PR 44594"),
        FlagHistory(
            "kv_cache_memory_bytes", "--kv-cache-memory-bytes", "0.11.0",
            "facts/vllm.md 2.3: v0.11.0 engine/arg_utils.py:766"),
    )
}

_VERSION_RE = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


def version_tuple(version: str) -> tuple[int, int, int]:
    """``'0.20.2rc1.dev9+g01d'`` -> ``(0, 20, 2)``; pre-release tags are ignored."""
    m = _VERSION_RE.match(str(version).strip())
    if not m:
        raise ValueError(f"not a vLLM version: {version!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def missing_flag_message(option: str, dest: str, version: str | None) -> str:
    """'vLLM 0.18.0 has no --scheduler-reserve-full-isl (added in 0.19.0)'."""
    who = f"vLLM {version}" if version else "this vLLM"
    hist = FLAG_HISTORY.get(dest)
    if hist is None:
        return f"{who} has no {option}"
    if version:
        try:
            if version_tuple(version) >= version_tuple(hist.added_in):
                return (f"{who} has no {option}, although it exists since {hist.added_in}; "
                        "is the help text from this version?")
        except ValueError:
            pass
    return f"{who} has no {hist.option} (added in {hist.added_in})"


# --------------------------------------------------------------------------
# Tolerant reader of Python reprs (the "non-default args" dict).
# --------------------------------------------------------------------------

_NUMBER_RE = re.compile(r"[-+]?(?:\d[\d_]*\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)j?")
_IDENT_RE = re.compile(r"[A-Za-z_][\w.]*")
_CLOSERS = {"(": ")", "[": "]", "{": "}"}


class _ReprReader:
    """Recursive descent over literals; an unknown repr such as
    ``KVTransferConfig(...)`` or ``<Enum.X: 'x'>`` is kept as its source text."""

    def __init__(self, text: str):
        self.s = text
        self.i = 0

    def fail(self, what: str):
        snippet = self.s[self.i:self.i + 30]
        raise ReprError(f"{what} at offset {self.i} ({snippet!r})")

    def ws(self):
        while self.i < len(self.s) and self.s[self.i].isspace():
            self.i += 1

    def peek(self) -> str:
        self.ws()
        return self.s[self.i] if self.i < len(self.s) else ""

    def value(self) -> Any:
        c = self.peek()
        if not c:
            self.fail("unexpected end")
        if c == "{":
            return self.braces()
        if c == "[":
            return self.sequence("[", "]")
        if c == "(":
            return tuple(self.sequence("(", ")"))
        if c in "'\"" or (c in "rbuRBU" and self.s[self.i + 1:self.i + 2] in ("'", '"')):
            return self.string()
        if c == "<":
            start = self.i
            self.skip_balanced("<", ">")
            return self.s[start:self.i]
        if c in "-+" and _IDENT_RE.match(self.s, self.i + 1):
            sign = -1.0 if c == "-" else 1.0
            self.i += 1
            word = self.ident_or_call()
            if word in ("inf", "nan"):
                return sign * float(word)
            return c + str(word)
        m = _NUMBER_RE.match(self.s, self.i)
        if m and m.group(0) not in ("-", "+"):
            self.i = m.end()
            return ast.literal_eval(m.group(0).replace("_", ""))
        if _IDENT_RE.match(self.s, self.i):
            word = self.ident_or_call()
            return {"True": True, "False": False, "None": None,
                    "inf": float("inf"), "nan": float("nan")}.get(word, word)
        self.fail("unexpected character")
        return None  # pragma: no cover

    def ident_or_call(self) -> str:
        start = self.i
        self.i = _IDENT_RE.match(self.s, self.i).end()
        if self.i < len(self.s) and self.s[self.i] == "(":
            self.skip_balanced("(", ")")
        return self.s[start:self.i]

    def skip_balanced(self, opener: str, closer: str):
        """Move past a bracketed run, honouring nesting and quoted strings."""
        stack = []
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in "'\"":
                self.string()
                continue
            if c == opener or (opener != "<" and c in _CLOSERS):
                stack.append(_CLOSERS.get(c, closer))
            elif stack and c == stack[-1]:
                stack.pop()
                if not stack:
                    self.i += 1
                    return
            self.i += 1
        self.fail(f"unclosed {opener}")

    def string(self) -> str:
        start = self.i
        while self.s[self.i] in "rbuRBU":
            self.i += 1
        quote = self.s[self.i]
        self.i += 1
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == "\\":
                self.i += 2
                continue
            self.i += 1
            if c == quote:
                value = ast.literal_eval(self.s[start:self.i])
                return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        self.i = start
        self.fail("unterminated string")
        return ""  # pragma: no cover

    def sequence(self, opener: str, closer: str) -> list:
        self.i += 1
        items = []
        while True:
            if self.peek() == closer:
                self.i += 1
                return items
            items.append(self.value())
            c = self.peek()
            if c == ",":
                self.i += 1
            elif c != closer:
                self.fail(f"expected ',' or {closer!r}")

    def braces(self) -> Any:
        self.i += 1
        if self.peek() == "}":
            self.i += 1
            return {}
        first = self.value()
        if self.peek() != ":":
            # a set repr
            items = [first]
            while self.peek() == ",":
                self.i += 1
                if self.peek() == "}":
                    break
                items.append(self.value())
            if self.peek() != "}":
                self.fail("expected '}'")
            self.i += 1
            return items
        out: dict = {}
        key = first
        while True:
            self.i += 1  # the ':'
            out[_hashable(key)] = self.value()
            c = self.peek()
            if c == ",":
                self.i += 1
                if self.peek() == "}":
                    self.i += 1
                    return out
            elif c == "}":
                self.i += 1
                return out
            else:
                self.fail("expected ',' or '}'")
            key = self.value()
            if self.peek() != ":":
                self.fail("expected ':'")


def _hashable(key: Any) -> Any:
    try:
        hash(key)
        return key
    except TypeError:
        return repr(key)


def parse_repr(text: str) -> Any:
    """Read a Python repr such as vLLM's ``non-default args`` dict.

    Literals become Python values; other reprs (``KVTransferConfig(...)``,
    ``<DynamicShapesType.BACKED: 'backed'>``, ``torch.bfloat16``) stay strings.
    """
    reader = _ReprReader(text)
    value = reader.value()
    reader.ws()
    if reader.i != len(reader.s):
        reader.fail("trailing text")
    return value


# --------------------------------------------------------------------------
# The flag table from ``vllm serve --help=all``.
# --------------------------------------------------------------------------

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
            opt = _normalise_option(name)
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


def _normalise_option(opt: str) -> str:
    """FlexibleArgumentParser turns ``--a_b`` into ``--a-b`` (up to the first '.')."""
    if opt.startswith("--"):
        head, dot, tail = opt[2:].partition(".")
        return "--" + head.replace("_", "-") + dot + tail
    return opt


_ENTRY_RE = re.compile(r"^  (-{1,2}[A-Za-z0-9][^\s,]*(?:.*?))(?:\s{2,}(\S.*))?$")
_POSITIONAL_RE = re.compile(r"^  ([A-Za-z_][\w-]*)(?:\s{2,}(\S.*))?$")
_JSON_MARK = "Should either be a valid JSON string or JSON keys passed individually"
_UPPER_METAVAR = re.compile(r"^[A-Z][A-Z0-9_]*$")


def _join_help(lines: list[str]) -> str:
    """Undo argparse's wrapping; a line that ends in 'word-' was split at a hyphen."""
    out = ""
    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        if not out:
            out = line
        elif re.search(r"[A-Za-z]-$", out) and line[:1].isalpha():
            out += line
        else:
            out += " " + line
    return out


def _parse_default(text: str) -> Any:
    text = text.strip()
    if text in ("None", "True", "False"):
        return {"None": None, "True": True, "False": False}[text]
    if re.fullmatch(r"[-+]?\d+", text):
        return int(text)
    if re.fullmatch(r"[-+]?(\d+\.\d*|\.\d+)([eE][-+]?\d+)?|[-+]?\d+[eE][-+]?\d+", text):
        return float(text)
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
    m = re.fullmatch(r"(.+?) \[(.+?) \.\.\.\]", metavar)
    if m and m.group(1) == m.group(2):
        return "+", m.group(1)
    return None, metavar


def _parse_choices(metavar: str) -> tuple[str, ...] | None:
    if metavar.startswith("{") and metavar.endswith("}"):
        return tuple(c for c in metavar[1:-1].split(","))
    if metavar.startswith("['") and metavar.endswith("]"):
        try:
            return tuple(str(c) for c in ast.literal_eval(metavar))
        except (ValueError, SyntaxError):
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
        if real and all(re.fullmatch(r"-?\d+", c) for c in real):
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


# --------------------------------------------------------------------------
# Values.
# --------------------------------------------------------------------------

_TRUE = {"true", "yes", "on", "1", "y", "t"}
_FALSE = {"false", "no", "off", "0", "n", "f"}


def _human_int(text: str) -> int:
    """vLLM's human_readable_int: 1k=1000, 1K=1024, 25.6k=25600, auto=-1."""
    text = text.strip()
    if text.lower() == "auto":
        return -1
    m = re.fullmatch(r"(-?\d+(?:\.\d+)?)([kKmMgGtT]?)", text)
    if not m:
        raise ValueError(text)
    number, unit = m.groups()
    if not unit:
        return int(number)
    decimal = {"k": 10 ** 3, "m": 10 ** 6, "g": 10 ** 9, "t": 10 ** 12}
    binary = {"K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40}
    if unit in binary:
        if "." in number:
            raise ValueError(text)
        return int(number) * binary[unit]
    return int(float(number) * decimal[unit])


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError(value)


def _to_int(value: Any, human: bool = False) -> int:
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        return _human_int(value) if human else int(value.strip())
    raise ValueError(value)


def _to_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return float(value.strip())
    raise ValueError(value)


def _maybe_json(text: str, brackets: str = "{") -> Any:
    if text[:1] in brackets:
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def convert_cli_value(flag: Flag, raw: str) -> Any:
    """One command-line string, typed as vLLM would type it; unparsable stays str."""
    try:
        if flag.kind == "int":
            if raw == "None" and flag.choices and "None" in flag.choices:
                return None
            return _to_int(raw, flag.human_int)
        if flag.kind == "float":
            return _to_float(raw)
        if flag.kind == "bool":
            return _to_bool(raw)
        if flag.kind == "json":
            return _maybe_json(raw, "{[")
    except ValueError:
        return raw
    if raw == "None" and flag.choices and "None" in flag.choices:
        return None
    return _maybe_json(raw, "{")


def format_value(value: Any) -> str:
    """YAML-ish spelling for messages: true/false/null, JSON for containers."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list, tuple)):
        try:
            return json.dumps(value, sort_keys=True, default=str)
        except (TypeError, ValueError):
            return repr(value)
    return str(value)


# --------------------------------------------------------------------------
# Secrets.
# --------------------------------------------------------------------------

MASK = "********"
SECRET_DESTS = frozenset({"api_key", "hf_token"})
_SECRET_OPTIONS = frozenset({"--api-key", "--hf-token"})
_SECRET_ENV_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*(?:TOKEN|KEY|SECRET|PASSWORD)[A-Za-z0-9_]*)=(.+)$",
                            re.IGNORECASE)


def mask_value(dest: str, value: Any) -> Any:
    if dest not in SECRET_DESTS or value is None or isinstance(value, bool):
        return value
    if isinstance(value, (list, tuple)):
        return [MASK for _ in value]
    return MASK


def _is_option(token: str) -> bool:
    """argparse: a leading '-' makes an option unless it reads as a negative number."""
    if not token.startswith("-") or token == "-":
        return False
    return not re.fullmatch(r"-\d+(\.\d*)?([eE][-+]?\d+)?|-\.\d+", token)


def mask_argv(argv: list[str], table: FlagTable | None = None) -> list[str]:
    """Hide the values of --api-key / --hf-token and of *TOKEN*=/*KEY*= env words."""

    def secret_values(name: str) -> int:
        """How many following words a secret option takes (0: not a secret)."""
        name = _normalise_option(name)
        flag = None
        if table is not None and name.startswith("-"):
            flag, _neg, _c = table.match_option(name)
        if flag is not None:
            if flag.dest not in SECRET_DESTS:
                return 0
            return len(argv) if flag.nargs in ("+", "*") else 1
        if name in _SECRET_OPTIONS:
            return len(argv) if name == "--api-key" else 1
        return 0

    out: list[str] = []
    masking = 0
    for token in argv:
        if masking and not _is_option(token):
            out.append(MASK)
            masking -= 1
            continue
        masking = 0
        if _is_option(token):
            name, eq, _value = token.partition("=")
            count = secret_values(name)
            if count and eq:
                out.append(name + "=" + MASK)
            else:
                out.append(token)
                masking = count
            continue
        if " " in token:
            # `bash -c "exec vllm serve ... --api-key K"`: one word holds a command
            out.append(" ".join(mask_argv(token.split(" "), table)))
            continue
        env = _SECRET_ENV_RE.match(token)
        out.append(f"{env.group(1)}={MASK}" if env else token)
    return out


# --------------------------------------------------------------------------
# Command lines.
# --------------------------------------------------------------------------

_API_SERVER_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")
_CLI_MODULES = ("vllm.entrypoints.cli.main", "vllm")
SOURCE_CMDLINE = "command line"
SOURCE_LOG = "boot log"
SOURCE_DEFAULT = "default"


@dataclass
class Setting:
    """A value set explicitly, with the words that set it (masked)."""

    dest: str
    value: Any
    evidence: str
    source: str = SOURCE_CMDLINE


@dataclass
class Unknown:
    """Something the version's flag table cannot account for."""

    flag: str
    source: str
    evidence: str
    reason: str = "unknown"     # unknown | ambiguous | missing value | positional


@dataclass
class ParsedCmdline:
    argv: list[str]
    launcher_index: int          # the vllm script, or '-m'
    args_index: int              # first argument of the server
    form: str                    # "serve" | "api_server"
    settings: dict[str, Setting] = field(default_factory=dict)
    unknown: list[Unknown] = field(default_factory=list)

    @property
    def args(self) -> list[str]:
        return self.argv[self.args_index:]


def split_cmdline(cmdline: Any) -> list[str]:
    """A list as given, or a string split like a shell would."""
    if isinstance(cmdline, (list, tuple)):
        argv = [str(a) for a in cmdline]
    elif isinstance(cmdline, str):
        try:
            argv = shlex.split(cmdline)
        except ValueError as exc:
            raise CmdlineError(f"cannot split the command line ({exc}); check its quoting") from None
    else:
        raise CmdlineError(f"cmdline must be a list or a string, got {type(cmdline).__name__}")
    if not argv:
        raise CmdlineError("the command line is empty")
    return argv


def locate_server_args(argv: list[str]) -> tuple[int, int, str]:
    """Find where the server's own arguments start.

    Recognises ``[python] /path/vllm serve ...``, ``python -m
    vllm.entrypoints.openai.api_server ...``, ``python -m vllm.entrypoints.cli.main
    serve ...`` and a bare ``serve ...`` or ``--flag ...`` argument list.
    """
    for i, token in enumerate(argv):
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if os.path.basename(token) == "vllm" and nxt == "serve":
            return i, i + 2, "serve"
        if token == "-m" and nxt in _API_SERVER_MODULES:
            return i, i + 2, "api_server"
        if token == "-m" and nxt in _CLI_MODULES and i + 2 < len(argv) and argv[i + 2] == "serve":
            return i, i + 3, "serve"
    if argv[0] == "serve":
        return 0, 1, "serve"
    if _is_option(argv[0]):
        return 0, 0, "serve"
    raise CmdlineError(
        "the command line does not look like a vLLM server: expected `vllm serve ...` "
        "or `python -m vllm.entrypoints.openai.api_server ...`, got: "
        + " ".join(mask_argv(argv))[:300])


def _nested(keys: list[str], value: Any) -> Any:
    for key in reversed(keys):
        value = {key: value}
    return value


def _merge(original: dict, update: dict) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(original.get(key), dict):
            _merge(original[key], value)
        elif isinstance(value, list) and isinstance(original.get(key), list):
            original[key] = original[key] + value
        else:
            original[key] = value


def parse_cmdline(cmdline: Any, table: FlagTable) -> ParsedCmdline:
    """Read a server command line as vLLM's FlexibleArgumentParser would.

    Handles ``--flag value``, ``--flag=value``, ``--no-flag``, short forms
    (``-tp 2``), ``--flag_with_underscores``, unique ``--`` prefixes, JSON
    values, dotted JSON keys (``-cc.mode=3``, ``--x.key+ a,b``), the positional
    model and repeats (the last one wins). Unknown words go to ``unknown``.
    """
    argv = split_cmdline(cmdline)
    try:
        launcher, start, form = locate_server_args(argv)
    except CmdlineError:
        # `bash -c "exec vllm serve ..."`: look inside a word that holds a command
        for token in argv:
            if " " in token and "vllm" in token:
                try:
                    inner = shlex.split(token)
                    locate_server_args(inner)
                except (ValueError, CmdlineError):
                    continue
                return parse_cmdline(inner, table)
        raise
    parsed = ParsedCmdline(argv=argv, launcher_index=launcher, args_index=start, form=form)
    args = argv[start:]
    masked = mask_argv(args, table)
    settings = parsed.settings
    dotted: dict[str, tuple[Flag, dict, list[str]]] = {}
    positional_done = False
    only_positional = False
    i = 0
    n = len(args)

    def put(flag: Flag, value: Any, evidence: str):
        settings[flag.dest] = Setting(flag.dest, value, evidence)

    while i < n:
        token = args[i]
        if token == "--" and not only_positional:
            only_positional = True
            i += 1
            continue
        if only_positional or not _is_option(token):
            model = table.flags.get("model_tag") if form == "serve" else None
            if model is not None and not positional_done:
                positional_done = True
                put(model, token, masked[i])
                if "model" in table.flags:
                    put(table.flags["model"], token, masked[i])
            else:
                parsed.unknown.append(Unknown(token, SOURCE_CMDLINE, masked[i], "positional"))
            i += 1
            continue

        name, eq, inline = token.partition("=")
        if not token.startswith("--") and not eq:
            name, inline = token, ""
        name = _normalise_option(name)
        inline_value = inline if eq else None

        # dotted JSON keys: --compilation-config.mode 3, -cc.mode=3, --x.list+ a,b
        if "." in name:
            base, _, keypath = name.partition(".")
            flag, _neg, _c = table.match_option(base)
            if flag is None:
                parsed.unknown.append(Unknown(base, SOURCE_CMDLINE, masked[i]))
                i += 1
                continue
            evidence = [masked[i]]
            if inline_value is None:
                inline_value = args[i + 1] if i + 1 < n else ""
                evidence.append(masked[i + 1] if i + 1 < n else "")
                i += 1
            i += 1
            append = keypath.endswith("+")
            keys = keypath.rstrip("+").split(".")
            if append:
                value: Any = inline_value.split(",")
            else:
                try:
                    value = json.loads(inline_value)
                except ValueError:
                    value = inline_value
            entry = dotted.setdefault(flag.dest, (flag, {}, []))
            _merge(entry[1], _nested(keys, value))
            entry[2].extend(evidence)
            continue

        flag, negative, candidates = table.match_option(name)
        if flag is None:
            reason = "ambiguous" if len(candidates) > 1 else "unknown"
            evidence = masked[i]
            # an unknown option's value would otherwise pass for the model
            if inline_value is None and i + 1 < n and not _is_option(args[i + 1]) \
                    and (positional_done or form != "serve" or i + 2 < n):
                evidence += " " + masked[i + 1]
                i += 1
            parsed.unknown.append(Unknown(name, SOURCE_CMDLINE, evidence, reason))
            i += 1
            continue

        words = [masked[i]]
        if flag.nargs == "0":
            if inline_value is not None:
                parsed.unknown.append(Unknown(name, SOURCE_CMDLINE, masked[i], "takes no value"))
                i += 1
                continue
            put(flag, not negative, masked[i])
            i += 1
            continue

        values: list[str] = []
        if inline_value is not None:
            values = [inline_value]
        elif flag.nargs in ("+", "*"):
            while i + 1 < n and not _is_option(args[i + 1]):
                i += 1
                values.append(args[i])
                words.append(masked[i])
        elif i + 1 < n and not _is_option(args[i + 1]):
            i += 1
            values = [args[i]]
            words.append(masked[i])
        i += 1

        if not values and flag.nargs in (None, "+"):
            parsed.unknown.append(Unknown(name, SOURCE_CMDLINE, words[0], "missing value"))
            continue
        if flag.nargs in ("+", "*"):
            value = [convert_cli_value(flag, v) for v in values]
        elif not values:          # nargs "?" with no value: argparse's const
            value = True
        else:
            value = convert_cli_value(flag, values[0])
        put(flag, mask_value(flag.dest, value), " ".join(words))
        if flag.dest == "model" and form == "serve" and "model_tag" in table.flags:
            # vllm serve moves --model to the positional model_tag
            put(table.flags["model_tag"], value, " ".join(words))
            positional_done = True

    # FlexibleArgumentParser appends dotted keys as one JSON value after the rest
    for dest, (flag, value, evidence) in dotted.items():
        settings[dest] = Setting(dest, value, " ".join(evidence))
    return parsed


# --------------------------------------------------------------------------
# Boot logs.
# --------------------------------------------------------------------------

_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
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
        line = _ANSI_RE.sub("", raw.rstrip("\n"))
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


def version_from_output(text: str) -> str | None:
    """The version in ``vllm --version`` output (its last version-like word)."""
    found = re.findall(r"(?<![\w.])v?(\d+\.\d+(?:\.\d+)?[\w.+-]*)", text or "")
    return found[-1] if found else None


# --------------------------------------------------------------------------
# /proc and systemd.
# --------------------------------------------------------------------------

def read_proc_cmdline(pid: int, proc: str = "/proc") -> list[str]:
    path = os.path.join(proc, str(pid), "cmdline")
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        raise SourceError(
            f"no process with pid {pid} ({path} does not exist); check that the vLLM "
            "server is running and the pid is current") from None
    except PermissionError:
        raise SourceError(f"cannot read {path}: permission denied; use become") from None
    argv = data.decode("utf-8", "replace").split("\0")
    if argv and argv[-1] == "":
        argv.pop()
    if not argv:
        raise SourceError(f"pid {pid} has an empty command line (a zombie or a kernel thread)")
    return argv


@dataclass
class UnitInfo:
    load_state: str
    main_pid: int
    exec_path: str | None
    exec_argv: str | None     # systemd joins argv with single spaces, unquoted


_EXEC_RE = re.compile(r"\{ path=(?P<path>.*?) ; argv\[\]=(?P<argv>.*?) ; ignore_errors=")


def parse_systemctl_show(text: str, unit: str) -> UnitInfo:
    props: dict[str, str] = {}
    for line in (text or "").splitlines():
        key, eq, value = line.partition("=")
        if eq and key not in props:
            props[key] = value
    load_state = props.get("LoadState", "")
    if load_state != "loaded":
        raise SourceError(
            f"unit {unit} not found (LoadState={load_state or 'unknown'}); check the name "
            f"with `systemctl list-unit-files '{unit}*'`")
    try:
        main_pid = int(props.get("MainPID", "0") or 0)
    except ValueError:
        main_pid = 0
    m = _EXEC_RE.search(props.get("ExecStart", ""))
    return UnitInfo(load_state=load_state, main_pid=main_pid,
                    exec_path=m.group("path") if m else None,
                    exec_argv=m.group("argv") if m else None)


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


# --------------------------------------------------------------------------
# Comparing with expect and forbid.
# --------------------------------------------------------------------------

@dataclass
class Mismatch:
    flag: str
    expected: Any
    actual: Any
    source: str
    check: str            # expect | forbid | version
    message: str


@dataclass
class Unsupported:
    flag: str
    dest: str | None
    source: str           # command line | boot log | expect | forbid
    added_in: str | None
    message: str


@dataclass
class Report:
    vllm_version: str | None
    explicit: dict[str, Any]
    effective: dict[str, Any]
    mismatches: list[Mismatch]
    unsupported: list[Unsupported]

    @property
    def problems(self) -> list[str]:
        return [u.message for u in self.unsupported] + [m.message for m in self.mismatches]

    @property
    def bad_input(self) -> list[str]:
        """Flags in expect/forbid this version lacks: the check cannot be made."""
        return [u.message for u in self.unsupported if u.source in ("expect", "forbid")]


def coerce_expected(flag: Flag, value: Any, where: str) -> Any:
    """Type an ``expect`` value from the flag table (bool/int/float/str)."""
    if value is None:
        return None
    kind = flag.kind
    try:
        if kind == "bool":
            return _to_bool(value)
        if kind == "int":
            if flag.choices and str(value) not in flag.choices:
                raise ExpectError(
                    f"{where}: {format_value(value)} is not one of {', '.join(flag.choices)}")
            return _to_int(value, flag.human_int)
        if kind == "float":
            return _to_float(value)
        if kind == "str" and not isinstance(value, (dict, list)):
            text = format_value(value) if isinstance(value, bool) else str(value)
            if flag.choices and text not in flag.choices:
                raise ExpectError(
                    f"{where}: {text!r} is not one of {', '.join(flag.choices)} "
                    f"(the choices of {flag.option})")
            return text
        if kind == "json" and isinstance(value, str):
            return _maybe_json(value, "{[")
    except ValueError:
        raise ExpectError(
            f"{where}: {value!r} is not a {kind} value, as {flag.option} needs "
            f"(its default is {format_value(flag.default)})") from None
    return value


def _coerce_like(actual: Any, expected: Any) -> Any:
    """Type an untyped actual (a string from the command line) like expected."""
    if not isinstance(actual, str) or isinstance(expected, str) or expected is None:
        return actual
    try:
        if isinstance(expected, bool):
            return _to_bool(actual)
        if isinstance(expected, int):
            return _to_int(actual, human=True)
        if isinstance(expected, float):
            return _to_float(actual)
        if isinstance(expected, (dict, list)):
            return _maybe_json(actual, "{[")
    except ValueError:
        return actual
    return actual


def values_equal(expected: Any, actual: Any) -> bool:
    """Equal after typing; a dict expected is a subset match, a scalar matches a
    one-element list."""
    actual = _coerce_like(actual, expected)
    if isinstance(expected, bool) or isinstance(actual, bool):
        return isinstance(expected, bool) and isinstance(actual, bool) and expected is actual
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        return float(expected) == float(actual)
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            k in actual and values_equal(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, (list, tuple)):
        return isinstance(actual, (list, tuple)) and len(actual) == len(expected) and all(
            values_equal(e, a) for e, a in zip(expected, actual))
    if isinstance(actual, (list, tuple)) and len(actual) == 1:
        return values_equal(expected, actual[0])
    if isinstance(expected, str) and not isinstance(actual, str) and actual is not None:
        return expected == format_value(actual)
    return expected == actual


def _resolve_request(table: FlagTable, name: str, where: str) -> tuple[Flag | None, str, str]:
    """(flag, dest, option spelling) for an expect/forbid key."""
    flag, negative = table.resolve(name)
    if flag is not None and negative:
        raise ExpectError(
            f"{where}: {name} is the negative form; name {flag.dest} and expect false instead")
    if flag is not None:
        return flag, flag.dest, flag.option
    raw = str(name).strip()
    dest = raw.lstrip("-").replace("-", "_")
    hist = FLAG_HISTORY.get(dest)
    option = hist.option if hist else (raw if raw.startswith("-") else "--" + raw.replace("_", "-"))
    return None, dest, option


def check(table: FlagTable, version: str | None, settings: dict[str, Setting],
          unknown: list[Unknown], expect: dict[str, Any] | None, forbid: list[str] | None,
          context: str = SOURCE_CMDLINE) -> Report:
    """Compare explicit settings (and the version's defaults) with the wants.

    ``context`` names where unset flags were looked for, for messages.
    """
    expect = dict(expect or {})
    forbid = list(forbid or [])
    who = f"vLLM {version}" if version else "this vLLM"
    mismatches: list[Mismatch] = []
    unsupported: list[Unsupported] = []

    for item in unknown:
        dest = item.flag.lstrip("-").replace("-", "_")
        hist = FLAG_HISTORY.get(dest)
        where = "the command line" if item.source == SOURCE_CMDLINE else "the boot log"
        if item.reason == "unknown":
            msg = (f"{missing_flag_message(item.flag, dest, version)}, but {where} sets it: "
                   f"{item.evidence}")
        elif item.reason == "positional":
            msg = f"unexpected argument {item.evidence!r} on {where} ({who} takes one model)"
        elif item.reason == "ambiguous":
            msg = f"{item.flag} on {where} is ambiguous for {who}; spell the flag out"
        else:
            msg = f"{item.flag} on {where}: {item.reason} ({item.evidence})"
        unsupported.append(Unsupported(item.flag, dest if item.reason == "unknown" else None,
                                       item.source, hist.added_in if hist else None, msg))

    seen: dict[str, str] = {}
    wanted: list[tuple[Flag, Any, str]] = []
    for name, value in expect.items():
        flag, dest, option = _resolve_request(table, name, f"expect.{name}")
        if dest in seen:
            raise ExpectError(f"expect names {dest} twice ({seen[dest]} and {name}); keep one")
        seen[dest] = str(name)
        if flag is None:
            hist = FLAG_HISTORY.get(dest)
            unsupported.append(Unsupported(option, dest, "expect", hist.added_in if hist else None,
                                           missing_flag_message(option, dest, version)
                                           + ("" if hist else "; check the name in expect")))
            continue
        wanted.append((flag, coerce_expected(flag, value, f"expect.{name}"), str(name)))

    forbidden: list[Flag] = []
    for name in forbid:
        flag, dest, option = _resolve_request(table, name, f"forbid {name}")
        if dest in seen:
            raise ExpectError(f"{dest} is both in expect and in forbid; keep one")
        seen[dest] = str(name)
        if flag is None:
            if dest in FLAG_HISTORY:
                continue            # this version cannot have it set
            unsupported.append(Unsupported(option, dest, "forbid", None,
                                           missing_flag_message(option, dest, version)
                                           + "; check the name in forbid"))
            continue
        forbidden.append(flag)

    for flag, expected, _name in wanted:
        setting = settings.get(flag.dest)
        if setting is not None:
            actual, source = setting.value, setting.source
            why = (f"{setting.evidence} on the command line" if source == SOURCE_CMDLINE
                   else setting.evidence)
        else:
            actual = flag.default if flag.default_known else None
            source = SOURCE_DEFAULT
            if not flag.default_known:
                default = "the help shows no default"
            else:
                default = f"the vLLM {version} default" if version else "the default"
            why = f"{default}; {flag.option} is not set on the {context}"
        if not values_equal(expected, actual):
            mismatches.append(Mismatch(
                flag.dest, expected, actual, source, "expect",
                f"{flag.dest}: expected {format_value(expected)}, running "
                f"{format_value(actual)} ({why})"))

    for flag in forbidden:
        setting = settings.get(flag.dest)
        if setting is None:
            continue
        why = (f"{setting.evidence} on the command line" if setting.source == SOURCE_CMDLINE
               else setting.evidence)
        mismatches.append(Mismatch(
            flag.dest, None, setting.value, setting.source, "forbid",
            f"{flag.dest}: must not be set, running {format_value(setting.value)} ({why})"))

    explicit = {dest: s.value for dest, s in settings.items()}
    effective: dict[str, Any] = {}
    for dest in list(explicit) + [f.dest for f, _e, _n in wanted] + [f.dest for f in forbidden]:
        if dest in explicit:
            effective[dest] = explicit[dest]
        else:
            flag = table.flags[dest]
            effective[dest] = flag.default if flag.default_known else None
    return Report(version, explicit, effective, mismatches, unsupported)


def version_mismatch(installed: str | None, logged: str | None) -> Mismatch | None:
    """The boot log's version differs from the installed one: a restart is due."""
    if not installed or not logged:
        return None
    try:
        if version_tuple(installed) == version_tuple(logged):
            return None
    except ValueError:
        if installed == logged:
            return None
    return Mismatch(
        "vllm_version", installed, logged, SOURCE_LOG, "version",
        f"vllm_version: installed {installed}, but the boot log shows the server started "
        f"with {logged}; restart it to run the installed version")


def combine_settings(cmd: dict[str, Setting] | None, log: dict[str, Setting] | None
                     ) -> dict[str, Setting]:
    """The command line wins over the boot log for a flag both name."""
    merged = dict(log or {})
    merged.update(cmd or {})
    return merged

