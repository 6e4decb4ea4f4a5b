"""The decision rule replayed over healthy probe groups recorded on the lab
(tests/fixtures/prefill/lab-healthy-groups.json, bench/prefill_detect.py
record): every "degraded" among them is false. Deterministic: the same
recorded samples, every (baseline, probe) pair."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from ansible.module_utils import prefill as p

REPO = Path(__file__).resolve().parents[3]
RECORDED = json.loads((REPO / "tests" / "fixtures" / "prefill" / "lab-healthy-groups.json").read_text())
LAB_FLOOR = yaml.safe_load((REPO / "inventory" / "lab" / "group_vars" / "vllm_engines" / "engine.yml").read_text())[
    "vllm_fleet_prefill_threshold_floor"]


def test_the_recording_is_real_lab_data():
    groups = RECORDED["groups"]
    assert len(groups) >= 149 and all(len(g) == p.GROUP_SIZE for g in groups)
    assert RECORDED["prompt_tokens"] == 1024 and RECORDED["source"].startswith("bench/prefill_detect.py record")


def test_at_the_lab_floor_false_degraded_stay_under_2_percent():
    # Baselines of two consecutive runs, as a real one is recorded (every pair: bench/prefill_detect.py --all-pairs).
    r = p.replay(RECORDED["groups"], floor=LAB_FLOOR, adjacent=True)
    assert r.n == 159 * 158
    assert r.rate < 0.02, f"{r.false_degraded} false degraded in {r.n} pairs"


def test_the_default_floor_is_too_low_for_the_lab():
    # Why the lab sets its own floor: at the quiet-GPU default, about 1 pair
    # in 20 of healthy runs reads degraded.
    assert p.replay(RECORDED["groups"], floor=p.FLOOR, adjacent=True).rate > 0.02


def test_a_calibrated_floor_is_not_stretched_by_the_baselines_noise():
    groups = RECORDED["groups"][:2]
    base = p.Baseline("0.32.0", "tiny", 1024, "2026-12-01T00:00:00+00:00", groups)
    th = p.threshold(base, floor=3.0)
    assert th.from_floor and th.detectable == th.value == 3.0
    noisy = p.threshold(p.Baseline("0.32.0", "tiny", 1024, "2026-12-01T00:00:00+00:00",
                                   ((0.035, 0.036, 0.037, 0.040), (0.056, 0.055, 0.058, 0.060))))
    assert noisy.too_noisy and not noisy.from_floor and noisy.detectable == pytest.approx(noisy.value * noisy.noise)


def test_adjacent_baselines_are_consecutive_runs():
    groups = [(1.0, 1.0, 1.0, 1.0)] * 5
    assert p.replay(groups, adjacent=True).n == 4 * 3
    assert p.replay(groups).n == 10 * 3
