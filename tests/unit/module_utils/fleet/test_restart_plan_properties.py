"""Property tests for plugins/module_utils/fleet/restart_plan.py, schedule.py's
runner_argv and their filter (plugins/filter/restart.py) over numbers past
range (tests/hostile.py): every number the playbooks pass (the expected
restart, the hold margin, the gate's limits, the pool before and after and its
tolerance, the consumers' move times, a restart's recorded durations, the
artifacts kept) replaced by 5,000 digits, inf, nan, an int past float's range
or numeric text.

What each promises: PlanError (ScheduleError; the filters'
AnsibleFilterError) and nothing else, and a message that quotes the value cut;
a plan, a pool check, a report and its line otherwise, whose numbers are
finite.
"""
from __future__ import annotations

import json

import pytest
from ansible.module_utils.fleet import restart_plan as rp
from ansible.module_utils.fleet import restart_report as rr
from ansible.module_utils.fleet import schedule
from filter_plugins import load_filters
from hostile import OUT_OF_RANGE, out_of_range
from hypothesis import given
from hypothesis import strategies as st

FILTERS = load_filters("restart")
from ansible.errors import AnsibleFilterError  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")

E1 = {"name": "e1", "head": "h1", "hosts": ["h1", "h2"], "api_url": "http://10.0.0.1:8000/v1"}
E2 = {"name": "e2", "head": "h3", "hosts": ["h3"], "api_url": "http://10.0.0.2:8000/v1"}
IDS = [str(i) for i in range(len(OUT_OF_RANGE))]


def plans(value):
    """Each plan() input that takes a number, set to ``value``."""
    down = {"e1": {"verdict": "down"}, "e2": {"verdict": "healthy"}}
    alone = {"e1": {"verdict": "prefill-degraded"}}
    yield lambda: rp.plan([E1, E2], down, expected_restart_s=value)
    yield lambda: rp.plan([E1, E2], down, hold_margin_s=value)
    for key in ("queue_timeout_s", "max_hold_s"):
        yield lambda key=key: rp.plan([E1], alone, mode="gate", gate={key: value})
        yield lambda key=key: rp.plan([E1], alone, mode="gate", gate={key: value}, accept_outage=True)


def assert_finite_json(value) -> None:
    json.dumps(value, allow_nan=False)


def raises_plan_error_only(fn):
    try:
        result = fn()
    except rp.PlanError as exc:
        assert len(str(exc)) < 1000
        return None
    assert_finite_json(result)
    return result


@given(out_of_range())
def test_plan_raises_only_plan_error(value):
    for fn in plans(value):
        raises_plan_error_only(fn)


@given(out_of_range(), out_of_range(), out_of_range())
def test_pool_check_raises_only_plan_error(before, after, tolerance):
    for args in ((before, after, tolerance), (before, 1000, 0.05), (1000, after, 0.05), (1000, 900, tolerance)):
        result = raises_plan_error_only(lambda args=args: rr.pool_check(*args))
        if result is not None:
            assert result["message"].startswith("KV pool")


@given(st.fixed_dictionaries({}, optional={"away": out_of_range(), "back": out_of_range()}),
       st.fixed_dictionaries({}, optional={k: out_of_range() for k in ("drained_s", "overhead_s", "downtime_s")}))
def test_report_and_its_line_raise_nothing_on_numbers(moved, recorded):
    plan_ = rp.plan([E1], {"e1": {"verdict": "down"}}, consumer_url=E1["api_url"])
    result = dict({"outcome": "restarted"}, **recorded)
    report = rr.report(plan_, {"e1": result}, moved)
    line = rr.report_line(report)
    assert line.startswith("vllm-fleet rolling restart ")
    assert "inf" not in line and "nan" not in line


@pytest.mark.parametrize("value", OUT_OF_RANGE, ids=IDS)
def test_each_number_past_range(value):
    """float() of a 5,000-digit int raised OverflowError, %d of inf and nan, and
    %r of a 5,000-digit int ValueError, out of plan and pool_check."""
    for fn in plans(value):
        raises_plan_error_only(fn)
    for args in ((value, 1000, 0.05), (1000, value, 0.05), (1000, 900, value)):
        raises_plan_error_only(lambda args=args: rr.pool_check(*args))


@pytest.mark.parametrize("value, words", [
    (10 ** 5000, "got a number of more than 30 digits"), (float("inf"), "got inf"), (float("nan"), "got nan"),
    ("1e999", "got '1e999'"), (-(10 ** 400), "got a number of more than 30 digits"),
], ids=["huge", "inf", "nan", "text", "negative-huge"])
def test_a_number_past_range_is_refused_with_the_value_cut(value, words):
    with pytest.raises(rp.PlanError, match="vllm_restart_expected_s must be a positive number of seconds, " + words):
        rp.plan([E1], {"e1": {"verdict": "down"}}, expected_restart_s=value)
    with pytest.raises(rp.PlanError, match="the pool after the restart must be a token count, " + words):
        rr.pool_check(1000, value, 0.05)
    with pytest.raises(rp.PlanError, match="the pool tolerance must be a fraction from 0 to below 1, " + words):
        rr.pool_check(1000, 900, value)


def test_a_pool_before_past_range_is_none_known():
    for before in (10 ** 5000, float("inf"), float("nan"), 10 ** 400):
        check = rr.pool_check(before, 4736, 0.05)
        assert (check["before"], check["ok"]) == (None, True)
        assert check["message"] == "KV pool 4736 tokens (none known before)"


@given(out_of_range())
def test_runner_argv_raises_only_schedule_error(rotate):
    try:
        argv = schedule.runner_argv("/v", "/p", "/d", "/i", "restart.yml", "/l", rotate)
    except schedule.ScheduleError as exc:
        assert len(str(exc)) < 300
        return
    assert argv[argv.index("--rotate-artifacts") + 1] == str(rotate)


@given(out_of_range(), out_of_range())
def test_the_filters_raise_only_their_error(value, rotate):
    for fn in (lambda: FILTERS["restart_pool_check"](1000, value, 0.05),
               lambda: FILTERS["restart_pool_check"](value, 1000, value),
               lambda: FILTERS["restart_plan"]([E1, E2], {"e1": {"verdict": "down"}, "e2": {"verdict": "healthy"}},
                                               expected_restart_s=value, hold_margin_s=value),
               lambda: FILTERS["restart_cron_job"]("/v", "/p", "/d", "/i", "restart.yml", "/l", rotate)):
        try:
            fn()
        except AnsibleFilterError:
            pass


@given(out_of_range(), out_of_range(), out_of_range())
def test_prefill_check_raises_only_plan_error(before, after, limit):
    for args in ((before, after, limit), (before, 0.001, 1.5), (0.001, after, 1.5), (0.001, 0.001, limit)):
        result = raises_plan_error_only(lambda args=args: rr.prefill_check(*args))
        if result is not None:
            assert result["message"].startswith("prefill")


@given(st.text(max_size=5000) | st.integers() | st.none())
def test_an_upgrade_plan_raises_only_plan_error_on_any_change(change):
    raises_plan_error_only(lambda: rp.plan([E1], {"e1": {"verdict": "healthy"}}, mode="gate",
                                           changes={"e1": change}))


@given(st.dictionaries(st.sampled_from(["e1", "e9", 3]),
                       st.one_of(st.none(), st.text(max_size=5), st.dictionaries(
                           st.sampled_from(["outcome", "step", "marks", "downtime_s"]),
                           st.one_of(st.none(), st.text(max_size=12), st.sampled_from(rr.RESULT_OUTCOMES),
                                     st.floats(allow_nan=False, allow_infinity=False), st.lists(st.none()))))))
def test_report_of_any_results_raises_only_plan_error(results):
    """Whatever the restarts recorded: a report whose every engine has an outcome, or PlanError."""
    plan_ = rp.plan([E1], {"e1": {"verdict": "down"}}, consumer_url=E1["api_url"])
    report = raises_plan_error_only(lambda: rr.report(plan_, results))
    if report is not None:
        assert all(e["outcome"] for e in report["engines"])
        raises_plan_error_only(lambda: rr.report_line(report))
