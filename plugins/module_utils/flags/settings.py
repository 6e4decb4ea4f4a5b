# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a source says is set: :class:`Setting` (a value and the words that set
it) and :class:`Unknown` (words the version's flag table cannot account for),
with where each came from.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
