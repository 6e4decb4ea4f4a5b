# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Typing flag values as vLLM does, and spelling them in messages.

:func:`convert_cli_value` types one command-line word from its
:class:`~flags.help.Flag`; the ``to_*`` helpers type a value an operator wrote;
:func:`format_value` spells a value the YAML way for messages;
:func:`load_json` reads JSON no deeper than :data:`~shared.pyrepr.MAX_DEPTH`;
:class:`JsonBrackets` finds JSON's brackets outside its strings, for
:func:`json_depth` and for the unit drift's split JSON words.

The ``to_*`` helpers and :func:`load_json` raise ValueError, and nothing else,
for their callers to catch; the other functions never raise.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from ansible.module_utils.flags.help import Flag
from ansible.module_utils.shared.pyrepr import MAX_DEPTH

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
    try:
        return int(float(number) * decimal[unit])
    except OverflowError:       # 1e400k: float() gives inf
        raise ValueError(text) from None


def to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError(value)


def to_int(value: Any, human: bool = False) -> int:
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        return _human_int(value) if human else int(value.strip())
    raise ValueError(value)


def to_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(value)
    try:
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            return float(value.strip())
    except OverflowError:       # an int past float's range
        raise ValueError(value) from None
    raise ValueError(value)


_JSON_SPECIAL = re.compile(r'[\[\]{}"\\]')


class JsonBrackets:
    """The brackets of JSON text outside its strings, in one pass over the
    text fed in pieces, in order (a string may go on from one piece into the
    next: ``in_string`` says whether one is open between pieces)."""

    def __init__(self) -> None:
        self.in_string = False

    def brackets(self, text: str) -> Iterator[str]:
        """Each ``[``, ``]``, ``{`` and ``}`` of ``text`` that stands outside a string."""
        escaped = -1        # a backslash at a piece's end escapes what joins it to the next
        for m in _JSON_SPECIAL.finditer(text):
            at, c = m.start(), m.group(0)
            if at == escaped:
                continue
            if self.in_string:
                if c == "\\":
                    escaped = at + 1
                elif c == '"':
                    self.in_string = False
            elif c == '"':
                self.in_string = True
            elif c != "\\":
                yield c


def json_depth(text: str, limit: int = MAX_DEPTH) -> int:
    """How deep the brackets of JSON ``text`` nest, counting no further than
    ``limit + 1`` (one pass; brackets inside strings do not count)."""
    depth = deepest = 0
    for c in JsonBrackets().brackets(text):
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > limit:
                break
        else:
            depth -= 1
    return deepest


def load_json(text: str) -> Any:
    """``json.loads``, with ValueError (not RecursionError) for JSON nested
    deeper than :data:`~shared.pyrepr.MAX_DEPTH`."""
    if not isinstance(text, str):
        raise ValueError(f"JSON is text, not {type(text).__name__}")
    if json_depth(text) > MAX_DEPTH:
        raise ValueError(f"JSON nested deeper than {MAX_DEPTH}")
    try:
        return json.loads(text)
    except RecursionError:      # a caller already deep in the stack
        raise ValueError("JSON nested too deep") from None


def maybe_json(text: str, brackets: str = "{") -> Any:
    if text[:1] in brackets:
        try:
            return load_json(text)
        except ValueError:
            return text
    return text


def convert_cli_value(flag: Flag, raw: str) -> Any:
    """One command-line string, typed as vLLM would type it; unparsable stays str."""
    try:
        if flag.kind == "int":
            if raw == "None" and flag.choices and "None" in flag.choices:
                return None
            return to_int(raw, flag.human_int)
        if flag.kind == "float":
            return to_float(raw)
        if flag.kind == "bool":
            return to_bool(raw)
        if flag.kind == "json":
            return maybe_json(raw, "{[")
    except ValueError:
        return raw
    if raw == "None" and flag.choices and "None" in flag.choices:
        return None
    return maybe_json(raw, "{")


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
