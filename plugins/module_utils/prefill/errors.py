# -*- coding: utf-8 -*-
# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The prefill probe's one exception, and how its messages quote a value.

Shared by metrics.py (the ``/metrics`` parser), decision.py (baseline and
verdict) and client.py; it imports none of them.
"""

from __future__ import annotations

import typing as t


class PrefillError(ValueError):
    """Input the probe cannot use; the message says what to check."""


def shown(text: str, limit: int = 80) -> str:
    """``text`` for a message: cut at ``limit``, control characters escaped."""
    return repr(text[:limit])[1:-1] + ("..." if len(text) > limit else "")


def brief(value: t.Any) -> str:
    """What ``value`` is, for a message, short whatever its size or depth."""
    if isinstance(value, str):
        return "'%s'" % shown(value, 40)
    if value is None or isinstance(value, (bool, float)):
        return repr(value)
    if isinstance(value, int):
        return repr(value) if value.bit_length() <= 64 else "an integer of %d bits" % value.bit_length()
    if isinstance(value, (list, tuple, dict)):
        return "a %s of %d" % (type(value).__name__, len(value))
    return "a %s" % type(value).__name__
