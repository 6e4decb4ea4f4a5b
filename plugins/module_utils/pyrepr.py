# -*- coding: utf-8 -*-
# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A tolerant reader of Python reprs.

vLLM logs its ``non-default args`` as a dict repr and ``--help=all`` shows
defaults as reprs; both hold literals mixed with reprs no literal parser reads
(``KVTransferConfig(...)``, ``<DynamicShapesType.BACKED: 'backed'>``,
``torch.bfloat16``). Standard library only.
"""
from __future__ import annotations

import ast
import re
from typing import Any

_NUMBER_RE = re.compile(r"[-+]?(?:\d[\d_]*\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)j?")
_IDENT_RE = re.compile(r"[A-Za-z_][\w.]*")
_CLOSERS = {"(": ")", "[": "]", "{": "}"}


class ReprError(ValueError):
    """A Python repr could not be read."""


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
