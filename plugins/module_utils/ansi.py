# -*- coding: utf-8 -*-
# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Strip terminal escape sequences from captured output.

vLLM colours its process prefixes (``\\x1b[1;36m(APIServer pid=1)\\x1b[0;0m``),
Ray colours its workers' (``\\x1b[36m(RayWorkerProc pid=24454)\\x1b[0m``), and a
log written through a terminal can hold any other sequence. Standard library
only.
"""
from __future__ import annotations

import re

# ECMA-48: a control sequence (ESC [ parameters intermediates final byte: every
# colour and cursor code, private modes such as ESC [?25l included), an
# operating-system command (ESC ] ... ended by BEL or ESC \, a window title),
# or a two-byte escape such as the ESC ( B that tput sgr0 prints.
_ANSI_RE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[ -/]*[0-~])")


def strip_ansi(text: str) -> str:
    """``text`` without its escape sequences; text without ESC is returned as is.

    An ESC that opens no sequence (cut, or before a byte no sequence takes) goes
    too, so no ESC is ever left: the result is stripped already (removing a code
    cannot join a stray ESC and the text after it into a new one)."""
    return _ANSI_RE.sub("", text).replace("\x1b", "") if "\x1b" in text else text
