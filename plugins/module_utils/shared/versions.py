# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parse and order version strings.

Two shapes, two parsers:

* :func:`version_tuple` is strict, for a version an operator writes as an
  option (``min_cuda_version: 12.8``): dotted numbers and nothing else.
* :func:`release_tuple` is lenient, for a version a program prints
  (``0.20.2rc1.dev9+g01d``): its first three numbers, tags ignored.

Both raise ValueError, with a "not a version" message, and nothing else. A
version's numbers are ASCII digits (``\\d`` and ``int()`` also take Arabic-Indic
and full-width ones) and at most :data:`MAX_DIGITS` of them: no release is
numbered past that, and ``int()`` refuses more than 4,300 digits.

Standard library only and no import of the project's other module_utils:
any of them may import it.
"""
from __future__ import annotations

import re

MAX_DIGITS = 9
# What a message quotes of a string that is no version, at most.
_SHOWN = 60

_DOTTED_RE = re.compile(r"[0-9]{1,%d}(?:\.[0-9]{1,%d})*" % (MAX_DIGITS, MAX_DIGITS))
# Unbounded here, so a number too long is refused whole, never read cut.
_RELEASE_RE = re.compile(r"v?([0-9]+)\.([0-9]+)(?:\.([0-9]+))?")
# A version-like word: not glued to a word or a dot before it.
_OUTPUT_RE = re.compile(r"(?<![\w.])v?([0-9]+\.[0-9]+(?:\.[0-9]+)?[\w.+-]*)")


def _refuse(what: str, value) -> ValueError:
    if isinstance(value, str):
        shown = repr(value if len(value) <= _SHOWN else value[:_SHOWN - 3] + "...")
    else:
        shown = "a %s" % type(value).__name__
    return ValueError(f"not a {what}: {shown}")


def version_tuple(text: str) -> tuple[int, ...]:
    """``"12.8"`` -> ``(12, 8)``; ValueError on anything but dotted numbers."""
    if not isinstance(text, str) or not _DOTTED_RE.fullmatch(text.strip()):
        raise _refuse("version", text)
    return tuple(int(p) for p in text.strip().split("."))


def version_at_least(have: str, need: str) -> bool:
    """``have >= need`` for :func:`version_tuple` versions; ``13`` is ``13.0``."""
    h, n = version_tuple(have), version_tuple(need)
    width = max(len(h), len(n))
    return h + (0,) * (width - len(h)) >= n + (0,) * (width - len(n))


def release_tuple(version: str) -> tuple[int, int, int]:
    """``'0.20.2rc1.dev9+g01d'`` -> ``(0, 20, 2)``; pre-release, post-release and
    local tags are ignored. ValueError when it does not start like a version."""
    m = _RELEASE_RE.match(version.strip()) if isinstance(version, str) else None
    if not m or any(len(part or "") > MAX_DIGITS for part in m.groups()):
        raise _refuse("vLLM version", version)
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def version_from_output(text: str) -> str | None:
    """The version in a ``--version`` output: its last version-like word that
    :func:`release_tuple` reads (so a caller never meets its ValueError)."""
    for found in reversed(_OUTPUT_RE.findall(text if isinstance(text, str) else "")):
        try:
            release_tuple(found)
        except ValueError:
            continue
        return found
    return None
