# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The exceptions of the vLLM flag check.

``vllm_flags_info`` maps :class:`VllmFlagsError`, and so every one below, to
``fail_json``; the message is for operators.
"""
from __future__ import annotations


class VllmFlagsError(Exception):
    """Base of every error the flag check raises; the message is for operators."""


class HelpTextError(VllmFlagsError):
    """The text given as the flag table is not ``vllm serve --help=all``."""


class CmdlineError(VllmFlagsError):
    """The command line is not a vLLM server's."""


class SourceError(VllmFlagsError):
    """A source (pid, unit, boot log) could not be read."""


class ExpectError(VllmFlagsError):
    """``expect`` or ``forbid`` is malformed."""
