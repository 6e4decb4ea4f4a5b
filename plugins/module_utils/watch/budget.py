# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The restart budget: how often an engine may be restarted without a
lasting cure before the toolkit stops restarting it and says so.

``state`` reads the cure ledger (ledger.py): an engine's restarts in the
window ``(now - window_s, now]`` that did not cure it, counted from after its
newest cured restart and its newest reset (an operator's "I fixed the
cause"); pending, failed and not-cured restarts all count. ``decide`` turns
that into a restart or a refusal whose message names the restarts, the
ledger and the reset command. Restarts of other engines, and entries dated
after ``now`` (a clock set wrong), count for nothing.

Everything here raises WatchError and nothing else.
"""

from __future__ import annotations

import dataclasses
import datetime

from ansible.module_utils.fleet.commands import command
from ansible.module_utils.fleet.restart_plan import POLICIES
from ansible.module_utils.shared.numeric import brief, finite
from ansible.module_utils.watch.errors import WatchError
from ansible.module_utils.watch.ledger import PATH, Ledger, parse_time, ratio_text, resets, restarts

RESET_PLAYBOOK = "playbooks/watch-reset.yml"
# Past these a budget means nothing (and a count past 4,300 digits could not be printed).
MAX_LIMIT = 1000
MAX_WINDOW_S = 10 * 366 * 86400


@dataclasses.dataclass(frozen=True)
class Budget:
    """At most ``limit`` restarts without a cure in ``window_s`` seconds."""

    limit: int
    window_s: float

    def __post_init__(self) -> None:
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or not 1 <= self.limit <= MAX_LIMIT:
            raise WatchError("the restart budget's limit must be an integer from 1 to %d, got %s"
                             % (MAX_LIMIT, brief(self.limit)))
        window = finite(self.window_s)
        if window is None or not 0 < window <= MAX_WINDOW_S:
            raise WatchError("the restart budget's window must be a finite number of seconds above 0 and at most "
                             "%d, got %s" % (MAX_WINDOW_S, brief(self.window_s)))


@dataclasses.dataclass(frozen=True)
class BudgetState:
    """What the budget holds for one engine now: ``entries`` are the counted
    restarts (the ledger's entries), oldest first; ``since`` the oldest's time."""

    engine: str
    limit: int
    window_s: float
    used: int
    remaining: int
    exhausted: bool
    entries: tuple[dict, ...]
    since: str | None

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Decision:
    """Whether to restart, a warning to show when the budget is overridden, and the message for the report."""

    restart: bool
    warning: str | None
    message: str

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def state(ledger: Ledger, engine: str, now: datetime.datetime | str, budget: Budget) -> BudgetState:
    """``engine``'s budget at ``now`` (an aware datetime) from ``ledger``."""
    if not isinstance(budget, Budget):
        raise WatchError("the budget must be a Budget(limit, window_s), got %s" % brief(budget))
    now = parse_time(now, "now")
    done = [(parse_time(e["at"]), e) for e in restarts(ledger, engine)]
    done = [(at, e) for at, e in done if at <= now]
    marks = [at for at, e in done if e["outcome"] == "cured"]
    marks += [at for at in (parse_time(e["at"]) for e in resets(ledger, engine)) if at <= now]
    start = max(marks) if marks else None
    counted = tuple(e for at, e in done if e["outcome"] != "cured" and (start is None or at > start)
                    and (now - at).total_seconds() < budget.window_s)
    used = len(counted)
    return BudgetState(engine, budget.limit, budget.window_s, used, max(0, budget.limit - used),
                       used >= budget.limit, counted, counted[0]["at"] if counted else None)


def span(seconds: float) -> str:
    """A window in words: "6 h", "30 min", "2 days", "90 s"."""
    s = float(seconds)
    for unit, name in ((86400, " days"), (3600, " h"), (60, " min")):
        if s >= unit * (2 if unit == 86400 else 1) and s % unit == 0:
            return "%d%s" % (s // unit, name)
    return "%d s" % s if s == int(s) else "%.1f s" % s


def _restart(entry: dict) -> str:
    return "%s (%s): prefill %s -> %s, %s" % (entry["at"], entry["trigger"], ratio_text(entry["before"]),
                                               ratio_text(entry["after"]), entry["outcome"])


def decide(state: BudgetState, policy: str, inventory_arg: str, ledger_path: str = PATH) -> Decision:
    """Whether the engine may be restarted now under ``policy``
    (restart_plan.POLICIES). An exhausted budget refuses, unless the policy is
    "always": the operator's word wins, with a warning. The reset command
    carries ``inventory_arg`` (the run's -i options)."""
    if not isinstance(state, BudgetState):
        raise WatchError("the state must be what budget.state() returned, got %s" % brief(state))
    if not isinstance(policy, str) or policy not in POLICIES:
        raise WatchError("policy %s is not one of %s" % (brief(policy), ", ".join(POLICIES)))
    if not isinstance(inventory_arg, str) or not isinstance(ledger_path, str):
        raise WatchError("inventory_arg and ledger_path must be text, got %s and %s"
                         % (brief(inventory_arg), brief(ledger_path)))
    window = span(state.window_s)
    used = "restart budget: %d of %d used in the last %s" % (state.used, state.limit, window)
    if not state.exhausted:
        return Decision(True, None, used)
    if policy == "always":
        return Decision(True, "the restart budget of engine %s is exhausted: %d restarts in the last %s did not cure "
                              "it (budget %d); restart_policy=always overrides the budget and restarts it anyway"
                              % (state.engine, state.used, window, state.limit),
                        used + " (exhausted; restart_policy=always restarts anyway)")
    reset = command(inventory_arg, RESET_PLAYBOOK, "-e reset_engine=%s" % state.engine,
                    '-e reason="<what you fixed>"')
    return Decision(False, None, (
        "not cured by restart: engine %s was restarted %d times in the last %s without a lasting cure (budget %d), "
        "so it is not restarted again. Its restarts: %s. The ledger is %s on its head. Find out why a restart "
        "does not cure it (docs/watch.md), then reset the budget: %s"
        % (state.engine, state.used, window, state.limit, "; ".join(_restart(e) for e in state.entries),
           ledger_path, reset)))
