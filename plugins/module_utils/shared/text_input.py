# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A reader's input as text, or its own documented error: what every parser of a
command's output or a log checks first (str or bytes, and at most so long)."""
from __future__ import annotations


def text_input(value, what: str, limit: int, error: type[Exception]) -> str:
    """``value`` as str: bytes decoded (bad UTF-8 replaced, never raised), checked against
    ``limit`` before decoding; anything else, or a longer text, raises ``error`` naming
    ``what``."""
    if isinstance(value, (bytes, bytearray)):
        if len(value) > limit:
            raise error("%s is %d bytes, over %d" % (what, len(value), limit))
        value = bytes(value).decode("utf-8", errors="replace")
    if not isinstance(value, str):
        raise error("%s must be str or bytes, got %s" % (what, type(value).__name__))
    if len(value) > limit:
        raise error("%s is %d characters, over %d" % (what, len(value), limit))
    return value
