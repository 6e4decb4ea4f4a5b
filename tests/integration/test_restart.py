"""playbooks/rolling-restart.yml on the lab, under the load of the lab's
multi-session client (lab/consumer): the fallback down, a Ray worker
crash while serving, a worker host down before and during a restart, a
failure mid-restart, the cron entry's exact command line, and two one-host
engines restarted one after the other in direct mode (repointed) and in gate
mode (drained at the gate).

The controller interrupted mid-run is test_upgrade.py's last switch: the
upgrade and the rolling restart share playbooks/drained-restart.yml.
The cure for the prefill slow-down itself (when-degraded, the consumers on
the lab's fallback model while the only engine restarts) is test_heal.py's:
the healing loop runs it on the watch's alert. Runs after the molecule
scenarios and test_heal.py, on the lab engine as the inventory defines it.
Each test leaves the engine healthy and the consumers on it, except the lost
worker's, which leaves both to the failure test after it.
"""
from __future__ import annotations

import json
import re
import subprocess
import time

import pytest
from labtools import (
    LAB_INVENTORY,
    RECOVERY_MARKER,
    REPO,
    consumer_app,
    files_holding,
    finish,
    lab_sh,
    on_host,
    restart,
    said,
    secret_values,
    start_playbook,
    stop_engines,
)
from test_serving_modes import (
    CLIENT,
    an_application_from_the_endpoint_file,
    consumer_endpoint,
    endpoint_env,
    now_ts,
    summary,
    wait_for,
)

pytestmark = pytest.mark.lab

ENGINE_URL = "http://10.200.0.11:8000/v1"
# The lab as two one-host engines (lab1, lab2); the last test here uses it.
TWO_ENGINES = REPO / "inventory" / "lab-two-engines" / "hosts.yml"
ENGINE_B_URL = "http://10.200.0.12:8000/v1"
FALLBACK_URL = "http://127.0.0.1:8001/v1"
FALLBACK_UNIT = "vllm-fleet-fallback.service"
VLLM_BIN = "/opt/vllm/bin/vllm"
# The engine's /health status as lab3 sees it (the hosts have no curl).
HEALTH_PROBE = (
    "import urllib.request, urllib.error\n"
    "try:\n"
    "    print(urllib.request.urlopen('http://10.200.0.11:8000/health', timeout=5).status)\n"
    "except urllib.error.HTTPError as e:\n"
    "    print(e.code)\n"
    "except OSError:\n"
    "    print('down')\n"
)


@pytest.fixture(scope="module")
def client(play):
    """The consumer application on lab3 with its session client running, in direct mode."""
    consumer_app(play)
    assert "VLLM_FLEET_MODE=direct" in endpoint_env(), "test_serving_modes.py leaves the lab in direct mode"
    on_host("lab3", f"systemctl start {CLIENT}")
    since = now_ts()
    wait_for(lambda: summary(since)["outcomes"].get("ok", 0) >= 3, 60, "the client's first answers")
    yield
    on_host("lab3", f"systemctl stop {CLIENT}")


def back_on_the_engine_with_nothing_lost(since: str, via: str = "", what: str = "answers from the engine") -> dict:
    """The consumers point at the engine again and it answers them; since ``since`` the
    application saw no error and no fallback of its own; ``via`` (a base URL) served some of
    its requests meanwhile. Returns the client's summary."""
    assert f"OPENAI_BASE_URL={ENGINE_URL}" in endpoint_env()
    mark = now_ts()
    wait_for(lambda: summary(mark)["by_base_url"].get(ENGINE_URL, {}).get("ok", 0) >= 3, 60, what)
    s = summary(since)
    assert s["outcomes"].get("error", 0) == 0 and s["outcomes"].get("fallback", 0) == 0, s
    if via:
        assert s["by_base_url"].get(via, {}).get("ok", 0) > 0, f"no request went to {via}"
    return s


def engine_started_at() -> str:
    return on_host("lab1", "systemctl show -p ActiveEnterTimestampMonotonic --value vllm.service").strip()


def test_a_fallback_that_does_not_answer_stops_the_run_before_anything_changes(client, play, tmp_path):
    """Fault: the consumers' fallback itself down during a planned fallback. Expected: the run
    fails before the engine is touched, naming the fallback; the consumers stay on the engine,
    which keeps serving them (0 errors, 0 fallbacks). Runs while the engine is healthy, before the
    stopped-worker test leaves it broken for the failure test's restart."""
    since = now_ts()
    before = (engine_started_at(), endpoint_env())
    on_host("lab3", f"systemctl stop {FALLBACK_UNIT}")
    try:
        r, _ = restart(play, tmp_path, "-e", "restart_policy=always")
    finally:
        on_host("lab3", f"systemctl start {FALLBACK_UNIT}")
    assert r.rc != 0
    assert said(r, f"Nothing was changed: {FALLBACK_URL} does not answer lab3")
    assert (engine_started_at(), endpoint_env()) == before
    back_on_the_engine_with_nothing_lost(since)


def test_a_ray_worker_crash_while_serving_turns_health_503_and_the_application_falls_back(client, play):
    """Fault: the engine's Ray worker on lab2 (RayWorkerProc, TP rank 1) killed while the sessions
    run (`lab/lab.sh fault kill-ray-worker lab2`). Expected: the head sees it at once and /health
    turns 503 (VLLM_KEEP_ALIVE_ON_ENGINE_DEATH keeps the API up, so the unit stays active and
    nothing restarts half the group); the application's requests fall back on their own (the
    outage as it sees it) and none is lost. The engine stays down for the next three tests: the
    lost worker's run reads it "down", and the failure test's when-degraded rerun restarts the whole
    group and brings the consumers back. For those tests the operator keeps it down on purpose
    (the engine-wanted marker removed, docs/provisioning.md): the power cut of lab2 two tests below
    would otherwise bring it back by itself, as test_power_cuts.py proves. The two one-host
    engines' engine play writes the marker again."""
    for host in ("lab1", "lab2"):
        on_host(host, f"rm -f {RECOVERY_MARKER}")
    since = now_ts()
    lab_sh("fault", "kill-ray-worker", "lab2")
    wait_for(lambda: summary(since)["outcomes"].get("fallback", 0) >= 3, 60, "the application's own fallbacks")
    wait_for(lambda: on_host("lab3", f"python3 -c \"{HEALTH_PROBE}\"").strip() == "503", 30, "/health 503")
    assert on_host("lab1", "systemctl is-active vllm.service").strip() == "active"
    s = summary(since)
    print(f"fault kill-ray-worker: {s['outcomes'].get('error', 0)} failed,"
          f" {s['outcomes'].get('fallback', 0)} fell back (the application's own) in the first"
          f" {s['longest_fallback_run_s']} s")
    assert s["outcomes"].get("error", 0) == 0, s


def test_a_stopped_worker_stops_the_run_before_anything_changes(client, play, tmp_path):
    """5. lab2 powered off: the run names it and touches nothing."""
    before = (engine_started_at(), endpoint_env())
    lab_sh("fault", "host-stop", "lab2")
    try:
        r, report = restart(play, tmp_path, "-e", "restart_policy=always")
    finally:
        lab_sh("fault", "host-start", "lab2")
    assert r.rc != 0
    assert said(r, "Nothing was changed: engine host(s) lab2 do not answer")
    assert report is None, "a run stopped by the preflight wrote a report"
    assert (engine_started_at(), endpoint_env()) == before


def test_a_worker_lost_mid_restart_fails_the_run_naming_it_and_the_consumers_stay_on_the_fallback(
        client, play, tmp_path):
    """Fault: lab2 powered off in the middle of a rolling restart, just after the consumers moved
    to the fallback. Expected: the run fails and names lab2; the consumers stay on the fallback,
    which serves them (0 errors, 0 fallbacks of their own); nothing brings them back to the broken
    engine. The failure test below restarts the engine with lab2 back, and its rerun converges.
    (The engine is down here, since the Ray worker crash two tests above, which the application
    saw as fallbacks of its own until this run moved it; they are counted from the move on.)"""
    out = tmp_path / "lost.log"
    run = start_playbook("playbooks/rolling-restart.yml", "-e", "restart_policy=always",
                         "-e", f"vllm_restart_report_path={tmp_path / 'lost.json'}", out=out)
    try:
        wait_for(lambda: f"OPENAI_BASE_URL={FALLBACK_URL}" in endpoint_env(), 300, "the consumers on the fallback")
        since = now_ts()
        lab_sh("fault", "host-stop", "lab2")
        lost_at = time.monotonic()
        rc = finish(run, timeout=600)
        failed_after_s = time.monotonic() - lost_at
    finally:
        finish(run, timeout=0)
        lab_sh("fault", "host-start", "lab2")
    text = out.read_text()
    print(text[-6000:])
    print(f"fault host-stop lab2 mid-restart: the run failed {failed_after_s:.0f} s after the loss")
    assert rc != 0
    assert files_holding(tmp_path, secret_values()) == []
    assert "host(s) lab2 stopped answering during this run" in " ".join(text.split()), text[-3000:]
    assert "1. restart engine_lab (lab1, lab2): restart_policy=always (diagnosed down)" in " ".join(text.split()), \
        "the crashed engine did not read down"
    report = json.loads((tmp_path / "lost.json").read_text())
    assert report["outcome"] == "failed" and report["engines"][0]["outcome"] == "failed", report
    assert f"OPENAI_BASE_URL={FALLBACK_URL}" in endpoint_env()
    mark = now_ts()
    wait_for(lambda: summary(mark)["by_base_url"].get(FALLBACK_URL, {}).get("ok", 0) >= 3, 60,
             "answers from the fallback after the loss")
    s = summary(since)
    assert s["outcomes"].get("error", 0) == 0 and s["outcomes"].get("fallback", 0) == 0, s


def test_a_failure_mid_restart_leaves_the_consumers_on_the_fallback(client, play, tmp_path):
    """6. `vllm` made unexecutable on the head (a broken upgrade; the lab's model is on a
    read-only mount): the run fails naming the step after Ray restarted, and the consumers stay
    on the fallback with zero errors. (The engine is already broken here and the consumers on
    the fallback: the test above lost lab2 mid-restart.) The rerun after the fix is the cron
    entry's run, the next test: when-degraded reads the engine down, restarts it and brings the
    consumers back."""
    assert on_host("lab1", f"chmod a-x {VLLM_BIN} && test ! -x {VLLM_BIN} && echo ok").strip() == "ok"
    try:
        r, report = restart(play, tmp_path, "-e", "restart_policy=always")
        assert r.rc != 0
        assert said(r, 'Engine engine_lab failed at the step "start the server and prove it"')
        assert said(r, "The consumers stay on the fallback endpoint. No later engine was touched.")
        (engine,) = report["engines"]
        assert report["outcome"] == "failed" and engine["outcome"] == "failed", report
        assert f"OPENAI_BASE_URL={FALLBACK_URL}" in endpoint_env()
        since = now_ts()
        wait_for(lambda: summary(since)["by_base_url"].get(FALLBACK_URL, {}).get("ok", 0) >= 3, 60,
                 "answers from the fallback")
    finally:
        on_host("lab1", f"chmod 755 {VLLM_BIN}")
    # The cause is fixed. The two failed restarts (this one and the lost worker's) spent the lab's
    # restart budget of 2: the next when-degraded run would hold the engine back ("not cured by
    # restart", test_heal.py proves it), so the operator resets it, as that message says.
    reset = play("playbooks/watch-reset.yml", extravars={"reset_engine": "engine_lab",
                                                         "reason": "vllm is executable again on lab1"})
    assert reset.rc == 0 and said(reset, "The restart budget of engine engine_lab is whole again")


def test_the_cron_entry_runs_the_restart_through_ansible_runner_and_an_overlap_exits_75(client, play, tmp_path):
    """7. schedule-restart.yml writes the entry, and a second run changes nothing (the
    restart_schedule scenario's converge and idempotence); its exact command line, run as cron
    runs it, does the restart through ansible-runner (status successful, rc 0, the report in
    set_stats); an overlapping run, while the first holds the lock, exits 75. (The entry's
    content, a venv without ansible-runner refused, and the entry's removal: the
    restart_schedule molecule scenario.)

    It is also the rerun after the failure test above, which left the engine down and the
    consumers on the fallback: when-degraded reads it down, restarts it, and brings them back
    with zero errors and zero fallbacks of their own."""
    since = now_ts()
    assert f"OPENAI_BASE_URL={FALLBACK_URL}" in endpoint_env(), "the failure test leaves the consumers on the fallback"
    cron_file = tmp_path / "vllm-fleet-restart"
    private = tmp_path / "runner"
    summary_file = tmp_path / "restart.log"
    schedule = {"restart_schedule_cron_file": str(cron_file), "restart_schedule_private_dir": str(private),
                "restart_schedule_inventory": str(LAB_INVENTORY), "restart_schedule_summary_file": str(summary_file),
                "restart_schedule_project_dir": str(REPO),
                # The lab's own inventory on purpose: refused without it (tests/unit/test_roles.py).
                "vllm_fleet_allow_lab_schedule": True}
    assert play("playbooks/schedule-restart.yml", extravars=schedule).rc == 0
    again = play("playbooks/schedule-restart.yml", extravars=schedule)
    assert again.rc == 0 and again.changed() == {}, f"a second run changed {again.changed()}"
    (line,) = [x for x in cron_file.read_text().splitlines() if x and not re.match(r"#|[A-Z_]+=", x)]
    fields = line.split(None, 6)
    assert fields[5] == "root"
    command = fields[6].replace("\\%", "%")  # cron turns "\%" back into "%"
    cron_env = {"PATH": "/usr/bin:/bin", "HOME": "/root", "SHELL": "/bin/sh", "LANG": "C.UTF-8"}
    run = subprocess.run(["/bin/sh", "-c", command], env=cron_env, capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    (ident,) = [p.name for p in (private / "artifacts").iterdir()]
    assert re.fullmatch(r"\d{8}T\d{6}Z", ident)
    artifacts = private / "artifacts" / ident
    assert (artifacts / "status").read_text().strip() == "successful"
    assert (artifacts / "rc").read_text().strip() == "0"
    stats = [json.loads(p.read_text()) for p in (artifacts / "job_events").glob("*.json")]
    stats = [e for e in stats if e.get("event") == "playbook_on_stats"]
    report = stats[0]["event_data"]["artifact_data"]["vllm_restart_report"] if stats else {}
    assert report.get("outcome") == "succeeded", report
    assert report["engines"][0]["outcome"] == "restarted" and report["engines"][0]["verdict"] == "down", report
    assert not (private / "env" / "cmdline").exists(), "ansible-runner left an env/cmdline for later runs"
    # artifacts/<ident>/command holds the whole environment, job_events every task's result.
    assert files_holding(private, secret_values()) == []
    assert re.search(r"rolling restart succeeded, policy when-degraded: engine_lab ", summary_file.read_text())
    # An overlap: the next run finds the lock held and exits 75, not 1.
    lock = re.search(r"flock -n -E 75 (\S+)", command).group(1)
    holder = subprocess.Popen(["flock", lock, "sleep", "60"])
    try:
        wait_for(lambda: subprocess.run(["flock", "-n", lock, "true"]).returncode != 0, 10, "the lock held")
        overlap = subprocess.run(["/bin/sh", "-c", command], env=cron_env, capture_output=True, text=True, timeout=60)
    finally:
        holder.kill()
        holder.wait()
    assert overlap.returncode == 75, overlap
    back_on_the_engine_with_nothing_lost(since, via=FALLBACK_URL, what="answers from the engine again")


def test_two_engines_restart_one_after_the_other_with_zero_failed_requests(client, play, tmp_path):
    """2. The lab as two one-host engines: engine_b (no consumer uses it) restarts first with
    nothing to drain, then engine_a, the consumers' engine, with them repointed at engine_b and
    back; zero failed requests. Leaves the lab in that shape for the gate-mode test below, and
    test_backends.py reshapes it into the TP2 engine on the mp backend (one converge instead of
    two).

    Moving a host from one engine to another needs both engines stopped first (a known gap:
    the Ray unit's new role is waited for before the whole-engine restart; docs/provisioning.md)."""
    stop_engines()
    assert play("playbooks/engine.yml", inventory=TWO_ENGINES).rc == 0, "the two engines did not converge"
    mark = now_ts()
    wait_for(lambda: summary(mark)["by_base_url"].get(ENGINE_URL, {}).get("ok", 0) >= 3, 60, "answers from engine_a")
    since = now_ts()
    r, report = restart(play, tmp_path, "-e", "restart_policy=always", inventory=TWO_ENGINES)
    assert r.rc == 0
    assert [(e["name"], e["outcome"], e["drain"]) for e in report["engines"]] == [
        ("engine_b", "restarted", "none"), ("engine_a", "restarted", "repoint")], report
    assert said(r, "the consumers use engine_b while it restarts")
    back_on_the_engine_with_nothing_lost(since, via=ENGINE_B_URL, what="answers from engine_a again")
    # A keyless site (inventory/lab-two-engines sets no API key): the consumers' file names vLLM's
    # placeholder, and the official client configured from the file alone is served (without it,
    # the client refused to start: "Missing credentials"). test_diagnose.py proves the keys again.
    assert consumer_endpoint()[2] == "EMPTY"
    assert an_application_from_the_endpoint_file() == "1"


def test_two_engines_in_gate_mode_the_gate_drains_the_one_that_restarts(client, play, tmp_path):
    """Gate mode, two engines, restart_engines=engine_a: the gate drains engine_a (its in-flight
    requests finish, new ones go to engine_b) and undrains it once it is back; engine_b is left
    alone: zero failed requests. (Both engines one after the other is the direct-mode test above;
    one restart here keeps the lab minutes down.) Uses the two-engine shape the test above leaves."""
    assert play("playbooks/gate-cutover.yml", "-e", "vllm_fleet_confirm=gate", inventory=TWO_ENGINES).rc == 0
    try:
        since = now_ts()
        r, report = restart(play, tmp_path, "-e", "restart_policy=always", "-e", "restart_engines=engine_a",
                            inventory=TWO_ENGINES)
        assert r.rc == 0
        assert [(e["name"], e["outcome"], e["drain"]) for e in report["engines"]] == [
            ("engine_a", "restarted", "gate-drain"), ("engine_b", "skipped", None)], report
        assert said(r, "skip engine_b: not named in restart_engines")
        assert said(r, "the gate sends new requests to engine_b while in-flight ones finish here")
        mark = now_ts()
        wait_for(lambda: summary(mark)["by_mode"].get("gate", {}).get("ok", 0) >= 3, 60, "answers through the gate")
    finally:
        assert play("playbooks/direct-cutover.yml", "-e", "vllm_fleet_confirm=direct", inventory=TWO_ENGINES).rc == 0
    s = summary(since)
    assert s["outcomes"].get("error", 0) == 0 and s["outcomes"].get("fallback", 0) == 0, s
