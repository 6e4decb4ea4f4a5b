# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""JSON read as hostile input: a key twice, a number past float's range, an
integer of more than MAX_INT_DIGITS digits and NaN or Infinity are refused
(json.loads takes each of them silently). ``loads`` raises Refused for those,
with a phrase the caller puts after what it read ("holds NaN, which is no
number"), and json's own ValueError (or RecursionError) for text that is not
JSON. The golden sets (fleet/golden.py) and the cure ledger (watch/ledger.py)
read their files through it."""

from __future__ import annotations

import collections
import json
import math
import typing as t

from ansible.module_utils.shared.numeric import brief

# Past any count or id these files hold (a token id has 10 digits, a pool of
# 2**53 tokens 16): a longer integer is garbage, and
# int() of a huge one is slow.
MAX_INT_DIGITS = 20


class Refused(Exception):
    """Raised inside json.loads' hooks; its message says what the text holds."""


def _unique_keys(pairs: list[tuple[str, t.Any]]) -> dict:
    # json.loads keeps the last of two equal keys: the document is ambiguous.
    data = dict(pairs)
    if len(data) != len(pairs):
        twice = next(key for key, n in collections.Counter(key for key, _ in pairs).items() if n > 1)
        raise Refused("names %s twice" % brief(twice))
    return data


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise Refused("holds %s, a number past float's range" % brief(text))
    return value


def _short_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise Refused("holds an integer of %d digits" % len(text.lstrip("-")))
    return int(text)


def _no_constant(text: str) -> t.NoReturn:
    raise Refused("holds %s, which is no number" % text)


def loads(text: str) -> t.Any:
    """The JSON value ``text`` holds; Refused, ValueError or RecursionError otherwise."""
    return json.loads(text, object_pairs_hook=_unique_keys, parse_float=_finite_float,
                      parse_int=_short_int, parse_constant=_no_constant)
