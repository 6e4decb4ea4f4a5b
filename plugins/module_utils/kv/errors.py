# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The failures ``vllm_kv_cache_info`` reports without a traceback: every one
is a :class:`KvCacheError`, its message saying what mismatched and what to do."""

from __future__ import annotations


class KvCacheError(Exception):
    """Base class: every failure the module reports without a traceback."""


class SourceError(KvCacheError):
    """The source could not be read (missing, unreadable, not a log...)."""


class BinaryInputError(SourceError):
    """The source holds NUL bytes in its first chunk."""


class EmptyInputError(SourceError):
    """The source is empty."""


class UnitNotFoundError(SourceError):
    """systemd does not know the unit."""


class CapacityNotFoundError(KvCacheError):
    """No capacity line in the latest boot."""


class NotEnoughSessionsError(KvCacheError):
    """Fewer full-context sessions fit than ``min_sessions``."""


class OptionError(KvCacheError):
    """An option's value is out of its range (:func:`kv.sessions.check_options`)."""
