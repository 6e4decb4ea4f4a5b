"""Tests for library/vllm_watch_metrics.py: argspec, what it writes from the
head's files (the lab's real prefill baseline), the kept diagnosis, check mode
and diff, no textfile directory, bad files. The renderer itself is tested in
tests/unit/module_utils/watch/test_textfile.py."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import vllm_watch_metrics as module
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2].parent
BASELINE = REPO / "tests" / "fixtures" / "watch" / "prefill-baseline.json"
ENGINE = "engine_lab"
DIAGNOSIS = {"engine": ENGINE, "verdict": "healthy", "reason": "prefill 1.02x its baseline",
             "evidence": {"ratio": 1.02}}


@pytest.fixture
def head(tmp_path):
    (tmp_path / "textfile").mkdir()
    shutil.copy(BASELINE, tmp_path / "prefill-baseline.json")
    return tmp_path


def args(head: Path, **extra) -> dict:
    return dict({"engine": ENGINE, "textfile_dir": str(head / "textfile"),
                 "baseline_path": str(head / "prefill-baseline.json"), "ledger_path": str(head / "ledger.jsonl"),
                 "diagnosis_path": str(head / "last-diagnosis.json"), "floor": 1.5}, **extra)


def series(path: Path) -> dict:
    return {s.name: s.value for f in text_string_to_metric_families(path.read_text()) for s in f.samples}


@pytest.mark.parametrize("missing", ["engine", "textfile_dir", "baseline_path", "ledger_path", "diagnosis_path",
                                     "floor"])
def test_each_required_option_is_required(run_module, head, missing):
    given = args(head)
    del given[missing]
    result = run_module(module, given)
    assert result["failed"] and result["msg"] == f"missing required arguments: {missing}"


def test_a_wrong_type_is_refused(run_module, head):
    result = run_module(module, args(head, floor="fast"))
    assert result["failed"] and "floor" in result["msg"] and "float" in result["msg"]


def test_the_baseline_is_exported_and_a_second_run_changes_nothing(run_module, head):
    first = run_module(module, args(head))
    path = head / "textfile" / f"vllm-fleet-{ENGINE}.prom"
    assert first["changed"] and first["file"] == str(path)
    got = series(path)
    assert got["vllm_fleet_prefill_probe_prompt_tokens"] == 1024
    assert got["vllm_fleet_prefill_passive_limit_ratio"] > got["vllm_fleet_prefill_threshold_ratio"] >= 1.5
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    assert not run_module(module, args(head))["changed"]


def test_a_diagnosis_is_kept_and_exported_by_later_runs_without_one(run_module, head):
    assert run_module(module, args(head, diagnosis=DIAGNOSIS))["changed"]
    kept = json.loads((head / "last-diagnosis.json").read_text())
    assert kept["diagnosis"] == DIAGNOSIS
    again = run_module(module, args(head))
    assert not again["changed"]
    got = series(head / "textfile" / f"vllm-fleet-{ENGINE}.prom")
    assert got["vllm_fleet_verdict"] in (0, 1) and "vllm_fleet_diagnosis_timestamp_seconds" in got


def test_check_mode_writes_nothing_and_diff_shows_the_file(run_module, head):
    result = run_module(module, args(head, diagnosis=DIAGNOSIS, _ansible_diff=True), check_mode=True)
    assert result["changed"] and "vllm_fleet_prefill_threshold_ratio" in result["diff"]["after"]
    assert list((head / "textfile").iterdir()) == [] and not (head / "last-diagnosis.json").exists()


def test_without_a_textfile_directory_nothing_is_written(run_module, head):
    shutil.rmtree(head / "textfile")
    result = run_module(module, args(head))
    assert not result["changed"] and result["file"] == "" and "nothing to export" in result["msg"]


def test_a_broken_baseline_fails_naming_it_and_writes_nothing(run_module, head):
    (head / "prefill-baseline.json").write_text("{not json")
    result = run_module(module, args(head))
    assert result["failed"] and "the prefill baseline" in result["msg"] and "fix or remove it" in result["msg"]
    assert list((head / "textfile").iterdir()) == []


def test_a_bad_engine_name_is_refused(run_module, head):
    result = run_module(module, args(head, engine='a"b\n'))
    assert result["failed"] and "cannot export" in result["msg"]
