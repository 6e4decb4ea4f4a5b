# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A tolerant reader of Python reprs.

vLLM logs its ``non-default args`` as a dict repr and ``--help=all`` shows
defaults as reprs; both hold literals mixed with reprs no literal parser reads
(``KVTransferConfig(...)``, ``<DynamicShapesType.BACKED: 'backed'>``,
``torch.bfloat16``). Standard library only.

Whatever the text, :func:`parse_repr` returns a value or raises
:class:`ReprError`: for brackets nested deeper than :data:`MAX_DEPTH`, for a
number longer than :data:`MAX_NUMBER_CHARS` or out of float range, and for a
literal Python would refuse (``08``, ``0x``, ``'\\x'``, an unterminated string).
Numbers are ASCII digits only, as Python prints them.
"""
from __future__ import annotations

import math
import re
import unicodedata
from typing import Any

# No repr vLLM prints nests this deep; the reader recurses once per level.
MAX_DEPTH = 100
# Python's int() refuses more digits than this (sys.int_info.default_max_str_digits),
# so no Python program prints a longer number.
MAX_NUMBER_CHARS = 4300

# A number-like word: what follows a digit up to the next delimiter, checked below.
# (No repeated group in these patterns: the re module keeps a backtracking
# state for every repeat of a group, some 60 bytes per character of a long word.)
_NUMBER_WORD_RE = re.compile(r"[-+]?\.?[0-9][0-9A-Za-z_.]*(?:(?<=[eE])[-+][0-9A-Za-z_.]*)?", re.ASCII)
_DIGITS = r"[0-9](?:_?[0-9])*"
_EXPONENT = rf"[eE][-+]?{_DIGITS}"
_FLOAT = rf"(?:(?:{_DIGITS})?\.{_DIGITS}|{_DIGITS}\.)(?:{_EXPONENT})?|{_DIGITS}{_EXPONENT}"
# Python's grammar for a decimal literal (a repr never prints 0x, 0o or 0b).
_NUMBER_RE = re.compile(
    rf"(?P<sign>[-+]?)(?:(?P<int>[1-9](?:_?[0-9])*|0(?:_?0)*)|(?P<float>{_FLOAT})"
    rf"|(?P<imag>{_FLOAT}|{_DIGITS})[jJ])", re.ASCII)
_IDENT_RE = re.compile(r"[A-Za-z_][\w.]*")
_STRING_RE = re.compile(r"(?P<prefix>[bB][rR]?|[rR][bB]?|[uU])?(?P<quote>['\"])")
# A character name is at most 88 letters long (Unicode 15).
_ESCAPE_RE = re.compile(r"\\(N\{[^}]{0,100}\}|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|x[0-9A-Fa-f]{2}|[0-7]{1,3}|.)",
                        re.S)
_SIMPLE_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "a": "\a", "b": "\b", "f": "\f", "n": "\n",
                   "r": "\r", "t": "\t", "v": "\v", "\n": ""}
_CLOSERS = {"(": ")", "[": "]", "{": "}"}


class ReprError(ValueError):
    """A Python repr could not be read."""


def closing_quote(text: str, start: int, quote: str) -> int:
    """The index of the first ``quote`` at or after ``start`` that no backslash
    escapes, or -1. Linear: each quote and backslash is looked at once."""
    end = text.find(quote, start)
    while end >= 0:
        backslash = text.find("\\", start, end)
        if backslash < 0:
            return end
        start = backslash + 2
        if start > end:
            end = text.find(quote, start)
    return -1


class _ReprReader:
    """Recursive descent over literals; an unknown repr such as
    ``KVTransferConfig(...)`` or ``<Enum.X: 'x'>`` is kept as its source text."""

    def __init__(self, text: str):
        self.s = text
        self.i = 0
        self.depth = 0

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
        if c in "{[(":
            self.depth += 1
            if self.depth > MAX_DEPTH:
                self.fail(f"brackets nested deeper than {MAX_DEPTH}")
            if c == "{":
                out = self.braces()
            elif c == "[":
                out = self.sequence("[", "]")
            else:
                out = tuple(self.sequence("(", ")"))
            self.depth -= 1
            return out
        if _STRING_RE.match(self.s, self.i):
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
        m = _NUMBER_WORD_RE.match(self.s, self.i)
        if m:
            return self.number(m)
        if _IDENT_RE.match(self.s, self.i):
            word = self.ident_or_call()
            return {"True": True, "False": False, "None": None,
                    "inf": float("inf"), "nan": float("nan")}.get(word, word)
        self.fail("unexpected character")
        return None  # pragma: no cover

    def number(self, word: re.Match) -> Any:
        text = word.group(0)
        if len(text) > MAX_NUMBER_CHARS:
            self.fail(f"a number longer than {MAX_NUMBER_CHARS} characters")
        m = _NUMBER_RE.fullmatch(text)
        if m is None:
            self.fail(f"not a Python number: {text[:30]!r}")
        digits = text.replace("_", "")
        try:
            if m.group("int") is not None:
                value = int(digits)
            elif m.group("float") is not None:
                value = float(digits)
            else:
                imag = float(digits[:-1].lstrip("+-"))
                value = complex(0, -imag if digits[0] == "-" else imag)
        except ValueError:      # int() past sys.get_int_max_str_digits(), which PYTHONINTMAXSTRDIGITS may lower
            self.fail(f"a number too long for Python: {text[:30]!r}")
        if not isinstance(value, int) and not (math.isfinite(value.real) and math.isfinite(value.imag)):
            self.fail(f"a number out of float range: {text[:30]!r}")
        self.i = word.end()
        return value

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
                self.string_end()
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

    def string_end(self) -> tuple[str, str, str]:
        """Move past a string literal; return its prefix (lower case), quote and body."""
        m = _STRING_RE.match(self.s, self.i)
        end = closing_quote(self.s, m.end(), m.group("quote"))
        if end < 0:
            self.fail("unterminated string")
        self.i = end + 1
        return (m.group("prefix") or "").lower(), m.group("quote"), self.s[m.end():end]

    def string(self) -> str:
        start = self.i
        prefix, _quote, body = self.string_end()
        is_bytes = "b" in prefix
        if is_bytes and not body.isascii():
            self.i = start
            self.fail("a non-ASCII character in a bytes literal")
        if "r" not in prefix and "\\" in body:
            body = _ESCAPE_RE.sub(lambda e: self.escape(e, is_bytes, start), body)
        if is_bytes:
            return body.encode("latin-1").decode("utf-8", "replace")
        return body

    def escape(self, m: re.Match, is_bytes: bool, start: int) -> str:
        """One backslash escape as Python reads it; ReprError where Python refuses it."""
        seq = m.group(1)
        head = seq[0]
        if head in "NuU" and is_bytes:
            return m.group(0)              # not an escape in a bytes literal
        if head in "01234567":
            code = int(seq, 8)
            if is_bytes and code > 0xFF:
                self.i = start
                self.fail(f"an octal escape out of range in a bytes literal: \\{seq}")
            return chr(code)
        if head in "xuU" and len(seq) > 1:
            code = int(seq[1:], 16)
            if code > 0x10FFFF:
                self.i = start
                self.fail(f"an escape past the last Unicode character: \\{seq}")
            return chr(code)
        if head == "N":
            if len(seq) > 1:
                try:
                    return unicodedata.lookup(seq[2:-1])
                except KeyError:
                    pass
            self.i = start
            self.fail(f"a \\N escape without a known character name: \\{seq[:40]}")
        if head in "xuU":
            self.i = start
            self.fail(f"a truncated \\{head} escape")
        # Python keeps an unknown escape such as \d as it is (and warns)
        return _SIMPLE_ESCAPES.get(head, m.group(0))

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
    Raises :class:`ReprError`, and nothing else, for text that is not a repr.
    """
    if not isinstance(text, str):
        raise ReprError(f"a repr is text, not {type(text).__name__}")
    reader = _ReprReader(text)
    value = reader.value()
    reader.ws()
    if reader.i != len(reader.s):
        reader.fail("trailing text")
    return value
