# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which vLLM version added the flags the toolkit relies on, and the message
for a flag a version lacks.

The history is read from the released wheels and the PRs that added each
flag; each entry cites its source.
"""
from __future__ import annotations

from dataclasses import dataclass

from ansible.module_utils.shared.versions import release_tuple


@dataclass(frozen=True)
class FlagHistory:
    dest: str
    option: str
    added_in: str
    citation: str


# Sources: the project's research notes (docs/reference/vllm.md section 2, copied into
# this repository), read from the released wheels: each citation names the
# wheel's file and line, and the PR that added the flag.
FLAG_HISTORY: dict[str, FlagHistory] = {
    h.dest: h for h in (
        FlagHistory(
            "scheduler_reserve_full_isl", "--scheduler-reserve-full-isl", "0.19.0",
            "docs/reference/vllm.md 2.1: absent in v0.18.0 config/scheduler.py; "
            "v0.19.0 engine/arg_utils.py:1250-1253; vllm-project/vllm PR 37307"),
        FlagHistory(
            "watermark", "--watermark", "0.24.0",
            "docs/reference/vllm.md 2.2: absent in v0.23.0; v0.24.0 engine/arg_utils.py:1439; "
            "vllm-project/vllm PR 44594"),
        FlagHistory(
            "kv_cache_memory_bytes", "--kv-cache-memory-bytes", "0.11.0",
            "docs/reference/vllm.md 2.3: v0.11.0 engine/arg_utils.py:766"),
    )
}


def missing_flag_message(option: str, dest: str, version: str | None) -> str:
    """'vLLM 0.18.0 has no --scheduler-reserve-full-isl (added in 0.19.0)'."""
    who = f"vLLM {version}" if version else "this vLLM"
    hist = FLAG_HISTORY.get(dest)
    if hist is None:
        return f"{who} has no {option}"
    if version:
        try:
            if release_tuple(version) >= release_tuple(hist.added_in):
                return (f"{who} has no {option}, although it exists since {hist.added_in}; "
                        "is the help text from this version?")
        except ValueError:
            pass
    return f"{who} has no {hist.option} (added in {hist.added_in})"
