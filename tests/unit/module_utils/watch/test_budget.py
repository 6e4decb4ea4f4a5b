"""Tests for plugins/module_utils/watch/budget.py: the restart budget read
from the cure ledger (state) and the decision taken on it (decide).

Table-driven over ledgers of one engine's restarts (test_ledger's entries):
the window's edges, cures and resets in between, other engines, a restart
written twice, a clock set wrong; then the decision under each policy.
"""
from __future__ import annotations

import datetime

import pytest
from ansible.module_utils.watch import budget as B
from ansible.module_utils.watch import ledger as L
from ansible.module_utils.watch.errors import WatchError
from test_ledger import ENGINE, ledger_of, reset, restart

NOW = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)
BUDGET = B.Budget(3, 6 * 3600)


def ago(hours: float = 0, seconds: float = 0) -> str:
    return (NOW - datetime.timedelta(hours=hours, seconds=seconds)).isoformat()


# (id, the ledger's entries in file order, the counted restarts' times, oldest first)
CASES = [
    ("empty", [], []),
    ("one", [restart(ago(1))], [ago(1)]),
    ("pending-failed-not-cured-all-count", [restart(ago(3), "pending"), restart(ago(2), "failed"),
                                            restart(ago(1), "not-cured")], [ago(3), ago(2), ago(1)]),
    ("at-the-window's-start-is-out", [restart(ago(6)), restart(ago(1))], [ago(1)]),
    ("just-inside-the-window", [restart(ago(6, -1))], [ago(6, -1)]),
    ("at-now", [restart(ago(0))], [ago(0)]),
    ("after-now-is-a-wrong-clock", [restart(ago(-1)), restart(ago(0, -1))], []),
    ("older-than-the-window", [restart(ago(30)), restart(ago(7))], []),
    ("a-cure-in-between", [restart(ago(5)), restart(ago(4)), restart(ago(3), "cured"), restart(ago(2))], [ago(2)]),
    ("a-cure-last", [restart(ago(5)), restart(ago(4)), restart(ago(3), "cured")], []),
    ("a-cure-before-the-window-still-counts", [restart(ago(8), "cured"), restart(ago(2))], [ago(2)]),
    ("a-cure-dated-after-now-cuts-nothing", [restart(ago(2)), restart(ago(-1), "cured")], [ago(2)]),
    ("a-reset-in-between", [restart(ago(5)), restart(ago(4)), reset(ago(3)), restart(ago(1))], [ago(1)]),
    ("a-reset-at-a-restart's-time", [restart(ago(2)), reset(ago(2))], []),
    ("a-reset-dated-after-now-cuts-nothing", [restart(ago(2)), reset(ago(-1))], [ago(2)]),
    ("the-newer-of-cure-and-reset", [restart(ago(5)), reset(ago(4)), restart(ago(3)), restart(ago(2), "cured"),
                                     restart(ago(1))], [ago(1)]),
    ("other-engines-count-for-nothing", [restart(ago(3), engine="engine_b"), restart(ago(2), engine="engine_b"),
                                         restart(ago(1)), reset(ago(0), engine="engine_b")], [ago(1)]),
    ("another-engine's-cure-cuts-nothing", [restart(ago(2)), restart(ago(1), "cured", engine="engine_b")], [ago(2)]),
    ("written-twice-is-one-restart", [restart(ago(2), "pending"), restart(ago(2), "not-cured")], [ago(2)]),
    ("pending-then-cured-is-cured", [restart(ago(3)), restart(ago(2), "pending"), restart(ago(2), "cured")], []),
    ("file-order-is-not-time-order", [restart(ago(1)), restart(ago(4)), restart(ago(2))], [ago(4), ago(2), ago(1)]),
    ("past-the-limit", [restart(ago(h)) for h in (5, 4, 3, 2, 1)], [ago(h) for h in (5, 4, 3, 2, 1)]),
]


@pytest.mark.parametrize("entries, counted", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_state(entries, counted):
    got = B.state(ledger_of(*entries), ENGINE, NOW, BUDGET)
    assert [e["at"] for e in got.entries] == counted
    assert (got.engine, got.limit, got.window_s) == (ENGINE, 3, 6 * 3600)
    assert got.used == len(counted)
    assert got.remaining == max(0, 3 - len(counted))
    assert got.exhausted is (len(counted) >= 3)
    assert got.since == (counted[0] if counted else None)
    assert all(e["outcome"] != "cured" and e["engine"] == ENGINE for e in got.entries)


def test_now_may_be_iso_text():
    led = ledger_of(restart(ago(1)))
    assert B.state(led, ENGINE, NOW.isoformat(), BUDGET) == B.state(led, ENGINE, NOW, BUDGET)
    assert B.state(led, ENGINE, "2026-12-01T14:00:00+02:00", BUDGET).used == 1


def test_a_budget_of_one():
    state = B.state(ledger_of(restart(ago(0.5))), ENGINE, NOW, B.Budget(1, 3600))
    assert (state.used, state.remaining, state.exhausted) == (1, 0, True)
    assert state.as_dict()["entries"][0]["at"] == ago(0.5)


@pytest.mark.parametrize("limit, window, words", [
    (0, 3600, "the restart budget's limit must be an integer from 1 to 1000, got 0"),
    (-1, 3600, "limit must be an integer from 1 to 1000, got -1"),
    (True, 3600, "limit must be an integer from 1 to 1000, got True"),
    (1.5, 3600, "got 1.5"),
    ("3", 3600, "got '3'"),
    (1001, 3600, "got 1001"),
    pytest.param(10 ** 5000, 3600, "got an integer of 16610 bits", id="limit-of-5000-digits"),
    (3, 0, "the restart budget's window must be a finite number of seconds above 0"),
    (3, -60, "got -60"),
    (3, float("inf"), "got inf"),
    (3, float("nan"), "got nan"),
    (3, 10 ** 400, "got an integer of 1329 bits"),
    (3, 11 * 366 * 86400, "at most 316224000"),
    (3, "6h", "got '6h'"),
])
def test_a_bad_budget_is_refused(limit, window, words):
    with pytest.raises(WatchError) as exc:
        B.Budget(limit, window)
    assert words in str(exc.value)


@pytest.mark.parametrize("args, words", [
    ((L.Ledger(), ENGINE, NOW.replace(tzinfo=None), BUDGET), "now '2026-12-01T12:00:00' has no UTC offset"),
    ((L.Ledger(), ENGINE, "noon", BUDGET), "now 'noon' is not an ISO 8601 time"),
    ((L.Ledger(), "engine lab", NOW, BUDGET), "engine 'engine lab' is no engine name"),
    (("", ENGINE, NOW, BUDGET), "the ledger must be what parse() returned"),
    ((L.Ledger(), ENGINE, NOW, (3, 3600)), "the budget must be a Budget(limit, window_s)"),
])
def test_state_refuses_what_is_not_its_input(args, words):
    with pytest.raises(WatchError) as exc:
        B.state(*args)
    assert words in str(exc.value)


# --- the decision ------------------------------------------------------------------------

EXHAUSTED = [restart(ago(5), "not-cured"), restart(ago(3), "failed", trigger="schedule"),
             restart(ago(1), "pending", trigger="operator")]
RESET_COMMAND = ("ansible-playbook -i inventory/lab playbooks/watch-reset.yml -e reset_engine=engine_lab "
                 '-e reason="<what you fixed>"')


def decision(entries, policy="when-degraded", inventory_arg="-i inventory/lab") -> B.Decision:
    return B.decide(B.state(ledger_of(*entries), ENGINE, NOW, BUDGET), policy, inventory_arg)


@pytest.mark.parametrize("policy", ["when-degraded", "always"])
@pytest.mark.parametrize("entries, used", [([], 0), (EXHAUSTED[:2], 2)])
def test_within_the_budget_it_restarts(entries, used, policy):
    assert decision(entries, policy) == B.Decision(True, None, "restart budget: %d of 3 used in the last 6 h" % used)


def test_an_exhausted_budget_refuses_and_says_how_to_reset():
    got = decision(EXHAUSTED)
    assert (got.restart, got.warning) == (False, None)
    assert got.message == (
        "not cured by restart: engine engine_lab was restarted 3 times in the last 6 h without a lasting cure "
        "(budget 3), so it is not restarted again. Its restarts: "
        "2026-12-01T07:00:00+00:00 (alert): prefill 1.62x -> 1.02x, not-cured; "
        "2026-12-01T09:00:00+00:00 (schedule): prefill 1.62x -> unread, failed; "
        "2026-12-01T11:00:00+00:00 (operator): prefill 1.62x -> unread, pending. "
        "The ledger is /var/lib/vllm-fleet/cure-ledger.jsonl on its head. Find out why a restart does not cure it "
        "(docs/watch.md), then reset the budget: " + RESET_COMMAND)


def test_the_reset_command_carries_the_runs_inventory():
    assert decision(EXHAUSTED, inventory_arg="-i inventory/site -i extra.yml").message.endswith(
        "ansible-playbook -i inventory/site -i extra.yml playbooks/watch-reset.yml -e reset_engine=engine_lab "
        '-e reason="<what you fixed>"')
    assert "ansible-playbook playbooks/watch-reset.yml" in decision(EXHAUSTED, inventory_arg="").message


def test_the_ledger_path_is_named():
    state = B.state(ledger_of(*EXHAUSTED), ENGINE, NOW, BUDGET)
    assert "The ledger is /srv/ledger.jsonl on its head." in B.decide(state, "when-degraded", "", "/srv/ledger.jsonl")\
        .message


def test_policy_always_overrides_an_exhausted_budget_with_a_warning():
    assert decision(EXHAUSTED + [restart(ago(0.5))], "always") == B.Decision(
        True, "the restart budget of engine engine_lab is exhausted: 4 restarts in the last 6 h did not cure it "
              "(budget 3); restart_policy=always overrides the budget and restarts it anyway",
        "restart budget: 4 of 3 used in the last 6 h (exhausted; restart_policy=always restarts anyway)")


def test_a_reset_gives_the_budget_back():
    assert decision(EXHAUSTED + [reset(ago(0.5))]).restart is True


@pytest.mark.parametrize("state, policy, inventory_arg, words", [
    ("state", "always", "", "the state must be what budget.state() returned"),
    (None, "always", "", "the state must be what budget.state() returned, got None"),
    ("ok", "never", "", "policy 'never' is not one of always, when-degraded"),
    ("ok", None, "", "policy None is not one of always, when-degraded"),
    ("ok", "always", None, "inventory_arg and ledger_path must be text, got None"),
])
def test_decide_refuses_what_is_not_its_input(state, policy, inventory_arg, words):
    if state == "ok":
        state = B.state(L.Ledger(), ENGINE, NOW, BUDGET)
    with pytest.raises(WatchError) as exc:
        B.decide(state, policy, inventory_arg)
    assert words in str(exc.value)


@pytest.mark.parametrize("seconds, words", [
    (21600, "6 h"), (3600, "1 h"), (86400, "24 h"), (172800, "2 days"), (7 * 86400, "7 days"), (5400, "90 min"),
    (60, "1 min"), (90, "90 s"), (0.5, "0.5 s"), (3600.0, "1 h"), (1234567, "1234567 s"),
])
def test_span(seconds, words):
    assert B.span(seconds) == words
