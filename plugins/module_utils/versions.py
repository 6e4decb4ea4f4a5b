# -*- coding: utf-8 -*-
# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parse and order version strings.

Two shapes, two parsers:

* :func:`version_tuple` is strict, for a version an operator writes as an
  option (``min_cuda_version: 12.8``): dotted numbers and nothing else.
* :func:`release_tuple` is lenient, for a version a program prints
  (``0.20.2rc1.dev9+g01d``): its first three numbers, tags ignored.

Standard library only and no import of the project's other module_utils, so a
filter plugin can load this file by path.
"""
from __future__ import annotations

import re

_DOTTED_RE = re.compile(r"\d+(?:\.\d+)*")
_RELEASE_RE = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")
# A version-like word: not glued to a word or a dot before it.
_OUTPUT_RE = re.compile(r"(?<![\w.])v?(\d+\.\d+(?:\.\d+)?[\w.+-]*)")


def version_tuple(text: str) -> tuple[int, ...]:
    """``"12.8"`` -> ``(12, 8)``; ValueError on anything but dotted numbers."""
    if not isinstance(text, str) or not _DOTTED_RE.fullmatch(text.strip()):
        raise ValueError(f"not a version: {text!r}")
    return tuple(int(p) for p in text.strip().split("."))


def version_at_least(have: str, need: str) -> bool:
    """``have >= need`` for :func:`version_tuple` versions; ``13`` is ``13.0``."""
    h, n = version_tuple(have), version_tuple(need)
    width = max(len(h), len(n))
    return h + (0,) * (width - len(h)) >= n + (0,) * (width - len(n))


def release_tuple(version: str) -> tuple[int, int, int]:
    """``'0.20.2rc1.dev9+g01d'`` -> ``(0, 20, 2)``; pre-release, post-release and
    local tags are ignored. ValueError when it does not start like a version."""
    m = _RELEASE_RE.match(str(version).strip())
    if not m:
        raise ValueError(f"not a vLLM version: {version!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def version_from_output(text: str) -> str | None:
    """The version in a ``--version`` output: its last version-like word."""
    found = _OUTPUT_RE.findall(text or "")
    return found[-1] if found else None
