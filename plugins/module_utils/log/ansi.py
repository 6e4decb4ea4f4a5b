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
# A sequence or a stray ESC (cut, or before a byte no sequence takes). One at a time, not a
# run: a repeated group would stack a backtracking point per code of a huge run.
_CODE_RE = re.compile(_ANSI_RE.pattern + r"|\x1b")
# What a figure is made of (digits, thousands separators, a decimal point): a removed
# run between two of these would join them into one figure.
_FIGURE_CHARS = frozenset("0123456789,._")


def strip_ansi(text: str) -> str:
    """``text`` without its escape sequences; text without ESC is returned as is.

    A stray ESC goes too, so none is ever left: the result is stripped already
    (a second pass cannot find a stray ESC and the text after it forming a new
    code) and cannot write one to a terminal. Where removing a run of codes
    would join two figures into one (``1,`` ESC ``0 0000`` is not 1,000), a
    space stands in its place, so a parser never reads a number the text does
    not write; no real capture colours inside a figure."""
    if "\x1b" not in text:
        return text
    pieces = _CODE_RE.split(text)
    out = [pieces[0]]
    last = pieces[0][-1:]
    for piece in pieces[1:]:
        if not piece:  # between two codes: the junction is where text resumes
            continue
        if last in _FIGURE_CHARS and piece[0] in _FIGURE_CHARS:
            out.append(" ")
        out.append(piece)
        last = piece[-1]
    return "".join(out)
