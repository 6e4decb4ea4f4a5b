# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A vLLM server's command line: where it comes from and what it sets.

:func:`read_proc_cmdline` reads a process's argv from ``/proc``;
:func:`split_cmdline` splits a given one; :func:`locate_server_args` finds
where the server's own arguments start; :func:`parse_cmdline` reads them
against the version's :class:`~flags.help.FlagTable` the way vLLM's
``FlexibleArgumentParser`` would.

Whatever the command line holds, :func:`split_cmdline` and
:func:`parse_cmdline` raise :class:`~flags.errors.CmdlineError` and
nothing else; :func:`read_proc_cmdline` raises
:class:`~flags.errors.SourceError`.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from ansible.module_utils.flags.errors import CmdlineError, SourceError
from ansible.module_utils.flags.help import Flag, FlagTable, is_option, normalise_option
from ansible.module_utils.flags.secrets_mask import mask_argv, mask_value
from ansible.module_utils.flags.settings import SOURCE_CMDLINE, Setting, Unknown
from ansible.module_utils.flags.values import convert_cli_value, load_json
from ansible.module_utils.shared.pyrepr import MAX_DEPTH, closing_quote

_API_SERVER_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")
_CLI_MODULES = ("vllm.entrypoints.cli.main", "vllm")


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


# POSIX shell words as shlex.split reads them: whitespace, '...', the start of
# "..." (where a backslash escapes only " and itself), a backslash-escaped
# character, other characters, and a quote or backslash left unpaired.
_SHELL_PIECE_RE = re.compile(r"""(?P<ws>[ \t\r\n]+)|'(?P<single>[^']*)'|(?P<double>")|\\(?P<escaped>.)
                                |(?P<plain>[^ \t\r\n'"\\]+)|(?P<unpaired>['\\])""", re.S | re.X)
_DOUBLE_ESCAPE_RE = re.compile(r'\\(["\\])')
# The word types a list may hold: YAML gives 2 for "2".
_WORD_TYPES = (str, int, float)


def _unsplittable(reason: str) -> str:
    return f"cannot split the command line ({reason}); check its quoting"


def shell_split(text: str) -> list[str]:
    """``shlex.split(text)`` in linear time (shlex is quadratic in a word's
    length); CmdlineError, with shlex's reason, for an unpaired quote or a
    trailing backslash."""
    words: list[str] = []
    word: list[str] = []
    in_word = False
    at = 0
    while at < len(text):
        m = _SHELL_PIECE_RE.match(text, at)
        kind = m.lastgroup
        at = m.end()
        if kind == "ws":
            if in_word:
                words.append("".join(word))
                word, in_word = [], False
            continue
        if kind == "unpaired":
            raise CmdlineError(_unsplittable("No escaped character" if m.group(0) == "\\" else "No closing quotation"))
        if kind == "double":
            end = closing_quote(text, at, '"')
            if end < 0:
                # shlex names a backslash left at the very end, inside the quote too
                trailing = len(text) - len(text.rstrip("\\"))
                raise CmdlineError(_unsplittable("No escaped character" if trailing % 2 else "No closing quotation"))
            piece = _DOUBLE_ESCAPE_RE.sub(r"\1", text[at:end])
            at = end + 1
        else:
            piece = m.group(kind)
        word.append(piece)
        in_word = True
    if in_word:
        words.append("".join(word))
    return words


def split_nul(text: str) -> list[str]:
    """argv as ``/proc/PID/cmdline`` holds it: each word ends with a NUL."""
    argv = text.split("\0")
    if argv and argv[-1] == "":
        argv.pop()
    return argv


def split_cmdline(cmdline: Any) -> list[str]:
    """A list as given, or a string split like a shell would; a string that
    holds NULs is ``/proc/PID/cmdline``'s form (no shell word holds a NUL)."""
    if isinstance(cmdline, (list, tuple)):
        for n, word in enumerate(cmdline, 1):
            if not isinstance(word, _WORD_TYPES):
                raise CmdlineError(f"cmdline word {n} is a {type(word).__name__}, not a word; "
                                   "give the command line as a list of strings")
        argv = [str(a) for a in cmdline]
    elif isinstance(cmdline, str):
        if "\0" in cmdline:
            argv = split_nul(cmdline)
        else:
            argv = shell_split(cmdline)
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
    if is_option(argv[0]):
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


def _inner_command(argv: list[str]) -> list[str] | None:
    """The command inside a word that holds one (`bash -c "exec vllm serve ..."`)."""
    for token in argv:
        if " " in token and "vllm" in token:
            try:
                inner = shell_split(token)
                locate_server_args(inner)
            except CmdlineError:
                continue
            return inner
    return None


class _ArgReader:
    """Reads a server's arguments word by word, as FlexibleArgumentParser
    would, into a :class:`ParsedCmdline` (see :func:`parse_cmdline`)."""

    def __init__(self, parsed: ParsedCmdline, table: FlagTable):
        self.parsed = parsed
        self.table = table
        self.args = parsed.args
        self.masked = mask_argv(self.args, table)
        self.n = len(self.args)
        self.i = 0
        self.dotted: dict[str, tuple[Flag, dict, list[str]]] = {}
        self.positional_done = False
        self.only_positional = False

    def put(self, flag: Flag, value: Any, evidence: str) -> None:
        self.parsed.settings[flag.dest] = Setting(flag.dest, value, evidence)

    def unknown(self, name: str, evidence: str, reason: str = "unknown") -> None:
        self.parsed.unknown.append(Unknown(name, SOURCE_CMDLINE, evidence, reason))

    def read(self) -> ParsedCmdline:
        while self.i < self.n:
            token = self.args[self.i]
            if token == "--" and not self.only_positional:
                self.only_positional = True
                self.i += 1
            elif self.only_positional or not is_option(token):
                self.positional(token)
            else:
                self.option(token)
        # FlexibleArgumentParser appends dotted keys as one JSON value after the rest
        for dest, (_flag, value, evidence) in self.dotted.items():
            self.parsed.settings[dest] = Setting(dest, value, " ".join(evidence))
        return self.parsed

    def positional(self, token: str) -> None:
        table, i = self.table, self.i
        model = table.flags.get("model_tag") if self.parsed.form == "serve" else None
        if model is not None and not self.positional_done:
            self.positional_done = True
            self.put(model, token, self.masked[i])
            if "model" in table.flags:
                self.put(table.flags["model"], token, self.masked[i])
        else:
            self.unknown(token, self.masked[i], "positional")
        self.i += 1

    def option(self, token: str) -> None:
        name, eq, inline = token.partition("=")
        if not token.startswith("--") and not eq:
            name, inline = token, ""
        name = normalise_option(name)
        inline_value = inline if eq else None
        # dotted JSON keys: --compilation-config.mode 3, -cc.mode=3, --x.list+ a,b
        if "." in name:
            self.dotted_key(name, inline_value)
            return
        flag, negative, candidates = self.table.match_option(name)
        if flag is None:
            self.unknown_option(name, inline_value, "ambiguous" if len(candidates) > 1 else "unknown")
        elif flag.nargs == "0":
            if inline_value is not None:
                self.unknown(name, self.masked[self.i], "takes no value")
            else:
                self.put(flag, not negative, self.masked[self.i])
            self.i += 1
        else:
            self.valued(flag, name, inline_value)

    def unknown_option(self, name: str, inline_value: str | None, reason: str) -> None:
        args, i, n = self.args, self.i, self.n
        evidence = self.masked[i]
        # an unknown option's value would otherwise pass for the model
        if inline_value is None and i + 1 < n and not is_option(args[i + 1]) \
                and (self.positional_done or self.parsed.form != "serve" or i + 2 < n):
            evidence += " " + self.masked[i + 1]
            i += 1
        self.unknown(name, evidence, reason)
        self.i = i + 1

    def dotted_key(self, name: str, inline_value: str | None) -> None:
        args, masked, i, n = self.args, self.masked, self.i, self.n
        base, _, keypath = name.partition(".")
        flag, _neg, _c = self.table.match_option(base)
        if flag is None:
            self.unknown(base, masked[i])
            self.i = i + 1
            return
        evidence = [masked[i]]
        if inline_value is None:
            inline_value = args[i + 1] if i + 1 < n else ""
            evidence.append(masked[i + 1] if i + 1 < n else "")
            i += 1
        self.i = i + 1
        append = keypath.endswith("+")
        keys = keypath.rstrip("+").split(".")
        if len(keys) > MAX_DEPTH:
            self.unknown(base, " ".join(evidence), f"keys nested deeper than {MAX_DEPTH}")
            return
        if append:
            value: Any = inline_value.split(",")
        else:
            try:
                value = load_json(inline_value)
            except ValueError:
                value = inline_value
        entry = self.dotted.setdefault(flag.dest, (flag, {}, []))
        _merge(entry[1], _nested(keys, value))
        entry[2].extend(evidence)

    def valued(self, flag: Flag, name: str, inline_value: str | None) -> None:
        """An option that takes values: inline, the next word, or (nargs + and *) every next word."""
        args, i, n = self.args, self.i, self.n
        words = [self.masked[i]]
        values: list[str] = []
        if inline_value is not None:
            values = [inline_value]
        elif flag.nargs in ("+", "*"):
            while i + 1 < n and not is_option(args[i + 1]):
                i += 1
                values.append(args[i])
                words.append(self.masked[i])
        elif i + 1 < n and not is_option(args[i + 1]):
            i += 1
            values = [args[i]]
            words.append(self.masked[i])
        self.i = i + 1
        if not values and flag.nargs in (None, "+"):
            self.unknown(name, words[0], "missing value")
            return
        if flag.nargs in ("+", "*"):
            value: Any = [convert_cli_value(flag, v) for v in values]
        elif not values:          # nargs "?" with no value: argparse's const
            value = True
        else:
            value = convert_cli_value(flag, values[0])
        self.put(flag, mask_value(flag.dest, value), " ".join(words))
        if flag.dest == "model" and self.parsed.form == "serve" and "model_tag" in self.table.flags:
            # vllm serve moves --model to the positional model_tag
            self.put(self.table.flags["model_tag"], value, " ".join(words))
            self.positional_done = True


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
        inner = _inner_command(argv)
        if inner is None:
            raise
        return parse_cmdline(inner, table)
    parsed = ParsedCmdline(argv=argv, launcher_index=launcher, args_index=start, form=form)
    return _ArgReader(parsed, table).read()


def read_proc_cmdline(pid: int, proc: str = "/proc") -> list[str]:
    """The argv of process ``pid``; SourceError when it cannot be read."""
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
    except (OSError, ValueError) as exc:     # ESRCH as the process exits; a NUL in the path
        raise SourceError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}; check that the "
                          "vLLM server is running and the pid is current") from None
    argv = split_nul(data.decode("utf-8", "replace"))
    if not argv:
        raise SourceError(f"pid {pid} has an empty command line (a zombie or a kernel thread)")
    return argv
