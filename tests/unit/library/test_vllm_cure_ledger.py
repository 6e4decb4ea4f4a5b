"""Tests for library/vllm_cure_ledger.py: each action against a real ledger file
(begin, settled, failed, reset, budget), check mode and diff, what the budget
refuses and with which command, and bad input that writes nothing. The logic
itself is tested in tests/unit/module_utils/watch/ (ledger, budget)."""
from __future__ import annotations

import json

import pytest
import vllm_cure_ledger as module
from ansible.module_utils.watch import ledger as L

ENGINE = "engine_lab"
DEGRADED = {"engine": ENGINE, "verdict": "prefill-degraded", "reason": "prefill 3.10x its baseline",
            "uptime_s": 86400.0, "evidence": {"ratio": 3.1, "threshold": 1.5, "kv_cache_tokens": 4736}}
HEALTHY = {"engine": ENGINE, "verdict": "healthy", "reason": "prefill 1.02x its baseline",
           "evidence": {"ratio": 1.02, "threshold": 1.5, "kv_cache_tokens": 4736}}


def args(tmp_path, action, **extra) -> dict:
    return dict({"engine": ENGINE, "ledger_path": str(tmp_path / "cure-ledger.jsonl"), "action": action}, **extra)


def lines(tmp_path) -> list:
    return [json.loads(x) for x in (tmp_path / "cure-ledger.jsonl").read_text().splitlines()]


def begin(run_module, tmp_path, **extra) -> dict:
    return run_module(module, args(tmp_path, "begin", before=DEGRADED, trigger="alert", policy="when-degraded",
                                   **extra))


def first_after(at: str = "2099-01-01T00:00:00+00:00", ratio: float = 1.01) -> dict:
    return {"verdict": "healthy", "at": at, "prefill_ratio": ratio, "threshold": 1.5}


def test_a_restart_is_begun_then_settled_cured(run_module, tmp_path):
    began = begin(run_module, tmp_path, evidence="/var/lib/vllm-fleet/evidence/x.tar.gz")
    assert began["changed"] and began["entry"]["outcome"] == "pending"
    assert began["entry"]["before"]["prefill_ratio"] == 3.1 and began["entry"]["before"]["uptime_s"] == 86400.0
    # The first reading is taken right after the restart; the settled one now.
    first = first_after(began["at"])
    done = run_module(module, args(tmp_path, "settled", at=began["at"], after_first=first, after=HEALTHY,
                                   threshold=1.5))
    assert done["changed"] and done["entry"]["outcome"] == "cured", done
    assert "under 1.50x" in done["entry"]["why"]
    assert [x["outcome"] for x in lines(tmp_path)] == ["pending", "cured"]
    assert [e["outcome"] for e in L.restarts(L.parse((tmp_path / "cure-ledger.jsonl").read_text()), ENGINE)] == [
        "cured"]


def test_a_settled_degraded_engine_is_not_cured(run_module, tmp_path):
    began = begin(run_module, tmp_path)
    done = run_module(module, args(tmp_path, "settled", at=began["at"], after_first=first_after(began["at"]),
                                   after=DEGRADED, threshold=1.5))
    assert done["entry"]["outcome"] == "not-cured" and "prefill-degraded" in done["entry"]["why"]


def test_a_failed_restart_is_recorded(run_module, tmp_path):
    began = begin(run_module, tmp_path)
    done = run_module(module, args(tmp_path, "failed", at=began["at"], why="the server did not answer"))
    assert done["entry"]["outcome"] == "failed" and lines(tmp_path)[-1]["why"] == "the server did not answer"


def test_the_budget_allows_then_refuses_with_the_reset_command_then_always_overrides(run_module, tmp_path):
    budget = dict(policy="when-degraded", budget_limit=2, budget_window_s=3600, inventory_arg="-i inventory/lab")
    first = run_module(module, args(tmp_path, "budget", **budget))
    assert not first["changed"] and first["decision"]["restart"] and first["budget"]["used"] == 0
    for _ in range(2):
        began = begin(run_module, tmp_path)
        run_module(module, args(tmp_path, "settled", at=began["at"], after_first=first_after(began["at"]),
                                after=DEGRADED, threshold=1.5))
    spent = run_module(module, args(tmp_path, "budget", **budget))
    assert spent["budget"]["exhausted"] and not spent["decision"]["restart"]
    message = spent["decision"]["message"]
    assert message.startswith("not cured by restart: engine engine_lab was restarted 2 times")
    assert "ansible-playbook -i inventory/lab playbooks/watch-reset.yml -e reset_engine=engine_lab" in message
    forced = run_module(module, args(tmp_path, "budget", **dict(budget, policy="always")))
    assert forced["decision"]["restart"] and "restart_policy=always" in forced["decision"]["warning"]
    # An operator's reset: the budget is whole again.
    assert run_module(module, args(tmp_path, "reset", by="alice", reason="replaced the NIC"))["changed"]
    assert run_module(module, args(tmp_path, "budget", **budget))["decision"]["restart"]


def test_check_mode_writes_nothing_and_diff_shows_the_line(run_module, tmp_path):
    result = run_module(module, dict(args(tmp_path, "begin", before=DEGRADED), _ansible_diff=True), check_mode=True)
    assert result["changed"] and '"outcome":"pending"' in result["diff"]["after"]
    assert not (tmp_path / "cure-ledger.jsonl").exists()


def test_a_torn_line_is_reported_and_kept_apart(run_module, tmp_path):
    (tmp_path / "cure-ledger.jsonl").write_text('{"kind": "restart", "engi\n')
    result = run_module(module, args(tmp_path, "budget", policy="when-degraded"))
    assert result["skipped_lines"] == [[1, "no JSON object on the line (torn, or not an entry)"]]
    assert result["decision"]["restart"]


@pytest.mark.parametrize("action, extra, words", [
    ("budget", {}, "missing: policy"),
    ("begin", {}, "missing: before"),
    ("failed", {"at": "2026-12-01T03:30:00+00:00"}, "missing: why"),
    ("settled", {"at": "2026-12-01T03:30:00+00:00"}, "missing: after_first, after, threshold"),
    ("reset", {"by": "alice"}, "missing: reason"),
])
def test_each_action_needs_its_options(run_module, tmp_path, action, extra, words):
    result = run_module(module, args(tmp_path, action, **extra))
    assert result["failed"] and words in result["msg"]


@pytest.mark.parametrize("action, extra, words", [
    ("begin", {"before": {"verdict": "sleepy"}}, "the diagnosis' verdict 'sleepy' is not one of"),
    ("failed", {"at": "2026-12-01T03:30:00+00:00", "why": "x"}, "has no restart of engine engine_lab that began"),
    ("failed", {"at": "yesterday", "why": "x"}, "is not an ISO 8601 time"),
    ("budget", {"policy": "when-degraded", "budget_limit": 0}, "limit must be an integer from 1"),
    ("reset", {"by": "alice", "reason": " "}, "reason must be non-empty text"),
])
def test_bad_input_is_refused_and_writes_nothing(run_module, tmp_path, action, extra, words):
    result = run_module(module, args(tmp_path, action, **extra))
    assert result["failed"] and words in result["msg"] and result["msg"].endswith("Nothing was written.")
    assert not (tmp_path / "cure-ledger.jsonl").exists()


def test_a_missing_folder_is_refused(run_module, tmp_path):
    result = run_module(module, dict(args(tmp_path, "begin", before=DEGRADED),
                                     ledger_path=str(tmp_path / "absent" / "l.jsonl")))
    assert result["failed"] and "does not exist" in result["msg"] and "playbooks/engine.yml" in result["msg"]
