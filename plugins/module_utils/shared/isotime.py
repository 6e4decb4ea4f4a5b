# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""An ISO 8601 time written by the toolkit (a baseline's or a golden set's
``recorded_at``), read back strictly.

Standard library only and no import of the project's other module_utils:
any of them may import it.
"""
from __future__ import annotations

import datetime


def iso_timestamp(text: str) -> float:
    """The POSIX time of ``text``, an ISO 8601 time such as
    ``2026-12-05T17:00:00+00:00``. Raises ValueError on anything else.

    ASCII only: ``fromisoformat()`` would read other digits. ``timestamp()``
    is what callers compare (with a unit's start), and it fails on year 1,
    so it is part of the check.
    """
    if not isinstance(text, str) or not text.isascii():
        raise ValueError("not an ASCII string")
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except (OverflowError, OSError) as exc:
        raise ValueError(str(exc)) from None
