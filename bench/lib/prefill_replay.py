"""The prefill decision rule replayed over recorded healthy probe groups: how often it
calls healthy runs degraded.

For ``bench/prefill_detect.py replay`` (docs/benchmarks.md) and the tests of the
lab's recorded groups; no engine head runs it, so it lives here, not in
plugins/module_utils/, which modules ship to the hosts. The rule itself is
prefill/decision.py's ``decide`` and ``threshold``, imported as a module does (run
plugins/module_utils_path.py first).
"""
from __future__ import annotations

import dataclasses
import itertools
import typing as t

from ansible.module_utils.prefill.decision import (
    FLOOR,
    MIN_GROUPS,
    Baseline,
    check_samples,
    decide,
    threshold,
)
from ansible.module_utils.prefill.errors import PrefillError


def false_positive_bound(n_clean: int, confidence: float = 0.95) -> float:
    """Upper bound on the FP rate after 0 false positives in ``n_clean`` independent runs."""
    if isinstance(n_clean, bool) or not isinstance(n_clean, int) or n_clean < 1:
        raise PrefillError("n_clean must be a positive integer, got %r" % (n_clean,))
    if not (isinstance(confidence, (int, float)) and 0 < confidence < 1):
        raise PrefillError("confidence must be between 0 and 1, got %r" % (confidence,))
    return 1 - (1 - confidence) ** (1.0 / n_clean)


@dataclasses.dataclass(frozen=True)
class ReplayResult:
    false_degraded: int
    n: int
    inconclusive: int
    groups: int

    @property
    def rate(self) -> float:
        return self.false_degraded / self.n if self.n else 0.0


def replay(groups: t.Sequence[t.Sequence[float]], baseline_groups: int = MIN_GROUPS,
           floor: float = FLOOR, adjacent: bool = False) -> ReplayResult:
    """Replay every (baseline of ``baseline_groups`` groups, other group as probe) through ``decide``.

    ``adjacent`` takes only baselines of consecutive groups (recorded one
    after the other, as a real baseline is), which is also much faster.

    All groups are healthy, so every ``degraded`` is false. ``n`` counts
    pairs, which are not independent: bound the FP rate with the number of
    independent recorded runs, not with ``n``.
    """
    clean = [check_samples(g, "group %d" % i) for i, g in enumerate(groups)]
    if len(clean) <= baseline_groups:
        raise PrefillError("replay needs more than %d groups, got %d" % (baseline_groups, len(clean)))
    false = n = inconclusive = 0
    if adjacent:
        # A real baseline's groups are recorded back to back: runs i, i+1, ...
        choices: t.Iterable[tuple[int, ...]] = (
            tuple(range(i, i + baseline_groups)) for i in range(len(clean) - baseline_groups + 1))
    else:
        choices = itertools.combinations(range(len(clean)), baseline_groups)
    for chosen in choices:
        base = Baseline("replay", "replay", 1, "1970-01-01T00:00:00+00:00", tuple(clean[i] for i in chosen))
        th = threshold(base, floor=floor)
        for j in range(len(clean)):
            if j in chosen:
                continue
            probe = clean[j]
            v = decide(base, probe[:2], limit=th)
            if v.needs_more:
                v = decide(base, probe[:2], probe[2:], limit=th)
            n += 1
            false += v.verdict == "degraded"
            inconclusive += v.verdict == "inconclusive"
    return ReplayResult(false, n, inconclusive, len(clean))
