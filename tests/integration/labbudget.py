"""The lab budget's check: the counts one lab phase measured against budget.toml.

Pure logic, with no lab and no hosts: tests/integration/conftest.py measures and
prints, the unit tests (tests/unit/lab/test_lab_budget.py) drive it with made-up counts.
"""
from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

BUDGET_FILE = Path(__file__).resolve().parent / "budget.toml"
_REPO = Path(__file__).resolve().parents[2]

# The enforced counts, by their key in the budget file, with the words the output uses.
COUNTS = {"engine_boots": "engine boots", "ray_starts": "Ray starts", "playbook_runs": "playbook runs"}
# Informational only: minutes depend on the machine, so they never fail a run.
MINUTES = "lab_minutes"

HOW_TO_RAISE = ('raise a budget only in a commit of its own that says which proof needs it '
                '(docs/lab.md, "The budget")')


# One play's first line, or a run's recap, in Ansible's log
# (``2026-12-07 11:20:59,187 p=26891 u=root n=ansible INFO| PLAY [name] ****``).
_PLAY_LINE = re.compile(r" p=(\d+) u=\S+ n=ansible \w*\| PLAY (\[|RECAP )")


def playbook_runs(log_text: str) -> int:
    """The ansible-playbook runs that ran a play, from Ansible's log. A run is its process
    id, but the kernel hands ids out again once it wraps (pid_max is 32768 on a small
    machine, and a lab phase starts far more processes than that): a PLAY line from a
    process whose last play line was its PLAY RECAP begins another run. Linear in the text."""
    runs = 0
    running: set[str] = set()
    for pid, what in _PLAY_LINE.findall(log_text):
        if what == "[":
            if pid not in running:
                runs += 1
                running.add(pid)
        else:
            running.discard(pid)
    return runs


class BudgetError(Exception):
    """The budget file or the measurement is unusable: an error, never a pass."""


@dataclass(frozen=True)
class Budget:
    counts: dict[str, int]
    lab_minutes: float
    path: Path

    @property
    def shown(self) -> str:
        return _shown(self.path)


@dataclass(frozen=True)
class Verdict:
    lines: list[str]  # each count against its budget, then the minutes for information
    over: list[str]   # e.g. "engine boots 27 > budget 25 (tests/integration/budget.toml)"

    @property
    def message(self) -> str | None:
        """What fails the run, or None when every count is within its budget."""
        if not self.over:
            return None
        return f"lab budget exceeded: {'; '.join(self.over)}; {HOW_TO_RAISE}"


def _shown(path: Path) -> str:
    """The file as the output names it: relative to the repository when inside it."""
    path = path.resolve()
    return str(path.relative_to(_REPO)) if path.is_relative_to(_REPO) else str(path)


def _is_count(value: object) -> bool:
    # TOML's true is a Python bool, itself an int: not a count.
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def load_budget(path: Path = BUDGET_FILE) -> Budget:
    """Read the budget file; every key must be there, and no other."""
    path = Path(path)
    shown = _shown(path)
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise BudgetError(f"{shown}: cannot read the lab budget: {err}") from err
    # A misspelt key would otherwise sit there enforcing nothing.
    unknown = sorted(set(data) - set(COUNTS) - {MINUTES})
    if unknown:
        raise BudgetError(f"{shown}: unknown key {', '.join(unknown)}; the keys are "
                          f"{', '.join([*COUNTS, MINUTES])}")
    for key in COUNTS:
        if key not in data:
            raise BudgetError(f"{shown}: {key} is missing")
        if not _is_count(data[key]):
            raise BudgetError(f"{shown}: {key} must be a non-negative integer, not {data[key]!r}")
    minutes = data.get(MINUTES)
    if minutes is None:
        raise BudgetError(f"{shown}: {MINUTES} is missing")
    if isinstance(minutes, bool) or not isinstance(minutes, int | float) or not 0 <= minutes < math.inf:
        raise BudgetError(f"{shown}: {MINUTES} must be a non-negative number, not {minutes!r}")
    return Budget({key: data[key] for key in COUNTS}, float(minutes), path)


def check(measured: Mapping[str, float], budget: Budget) -> Verdict:
    """Each measured count against its budget; ``measured`` may also hold lab_minutes."""
    lines, over = [], []
    for key, words in COUNTS.items():
        if key not in measured:
            raise BudgetError(f"the lab run did not measure {key}, which {budget.shown} budgets")
        count, limit = measured[key], budget.counts[key]
        if not _is_count(count):
            raise BudgetError(f"the lab run measured {key} as {count!r}, not a count ({budget.shown})")
        lines.append(f"{words:<48} {count:6d}  (budget {limit}{': over' if count > limit else ''})")
        if count > limit:
            over.append(f"{words} {count} > budget {limit} ({budget.shown})")
    if measured.get(MINUTES) is not None:
        lines.append(f"{'lab minutes':<48} {measured[MINUTES]:6.1f}  (budget {budget.lab_minutes:.1f}, "
                     "for information: minutes depend on the machine)")
    return Verdict(lines, over)
