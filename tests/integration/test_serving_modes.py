"""Gate mode and direct mode on the lab, under the load of the lab's
multi-session client (lab/consumer), which rereads endpoint.env before every
request and falls back to a fallback model on failure.

Needs a converged lab (test_site.py runs first; the module fixture converges
again if run alone).

The gate cutover and its rerun are gate_service's converge and idempotence:
its molecule scenario's verify runs here, on the gate that cutover started
(tests/integration/test_molecule.py).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest
from labtools import (
    consumer_app,
    engine_metrics,
    files_holding,
    finish,
    interrupt,
    lab_sh,
    restart,
    said,
    secret_values,
    start_playbook,
    was_interrupted,
)
from openai_suite import run_suite
from test_molecule import RAN_THERE, assert_scenario_passed, molecule_test

pytestmark = pytest.mark.lab

CLIENT = "vllm-fleet-session-client.service"
LOG = "/var/log/vllm-fleet/session-client.jsonl"


def on_host(host: str, cmd: str) -> str:
    return lab_sh("ssh", host, cmd, check=False).stdout


def now_ts() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]


def summary(since: str) -> dict:
    out = on_host("lab3", f"python3 /opt/vllm-fleet/consumer/session_client.py --summary {LOG} --since {since}")
    return json.loads(out)


def client_records(since: str) -> list[dict]:
    """The session client's log records from ``since`` on (request start times, UTC)."""
    lines = on_host("lab3", f"cat {LOG}").splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    return [rec for rec in records if rec["ts"][:len(since)] >= since]


def endpoint_env() -> str:
    return on_host("lab3", "cat /etc/vllm-fleet/endpoint.env")


def endpoint_variables() -> dict[str, str]:
    """The consumers' endpoint file as an application loads it into its environment."""
    return dict(line.split("=", 1) for line in endpoint_env().splitlines() if "=" in line and not line.startswith("#"))


def consumer_endpoint() -> tuple[str, str, str | None]:
    """The base URL, model and API key the consumers are pointed at now."""
    env = endpoint_variables()
    return env["OPENAI_BASE_URL"], env["OPENAI_MODEL"], env.get("OPENAI_API_KEY")


# An application configured from the endpoint file alone: the official client reads
# OPENAI_BASE_URL and OPENAI_API_KEY from its environment, the model comes from OPENAI_MODEL.
APPLICATION = ("import os, openai\n"
               "client = openai.OpenAI(timeout=60, max_retries=0)\n"
               "answer = client.completions.create(model=os.environ['OPENAI_MODEL'], prompt='ping', max_tokens=1)\n"
               "print(answer.usage.completion_tokens)\n")


def an_application_from_the_endpoint_file() -> str:
    """Run the official openai client with the consumers' endpoint file as its only
    configuration (no key, URL or model of the test's own); return what it printed: "1"
    when the endpoint served it, else its error (which never holds the key)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env.update(endpoint_variables())
    out = subprocess.run([sys.executable, "-c", APPLICATION], env=env, capture_output=True, text=True, timeout=120)
    if out.returncode == 0:
        return out.stdout.strip()
    return (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]


def gate_health() -> str:
    """The gate's /health status as seen on its host (the hosts have no curl)."""
    probe = (
        "import urllib.request, urllib.error\n"
        "try:\n"
        "    print(urllib.request.urlopen('http://10.200.0.13:8100/health', timeout=2).status)\n"
        "except urllib.error.HTTPError as e:\n"
        "    print(e.code)\n"
        "except OSError:\n"
        "    print('down')\n"
    )
    return on_host("lab3", f"python3 -c \"{probe}\"").strip()


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.fixture(scope="module")
def client(play):
    """A converged lab in direct mode with the session client running. test_site.py leaves the
    lab converged (its last test is a site.yml run); converging it again would prove nothing."""
    if on_host("lab1", "systemctl is-active vllm.service").strip() != "active":
        assert play("site.yml").rc == 0
    consumer_app(play)
    if "VLLM_FLEET_MODE=gate" in endpoint_env():
        assert play("playbooks/direct-cutover.yml", "-e", "vllm_fleet_confirm=direct").rc == 0
    on_host("lab3", f"systemctl start {CLIENT}")
    since = now_ts()
    wait_for(lambda: summary(since)["outcomes"].get("ok", 0) >= 3, 60, "the client's first answers")
    yield
    on_host("lab3", f"systemctl stop {CLIENT}")


def test_a_cutover_needs_an_explicit_confirmation(client, play):
    before = endpoint_env()
    r = play("playbooks/gate-cutover.yml")
    assert r.rc != 0
    assert "Run it again with -e vllm_fleet_confirm=gate" in r.stdout
    # The command to run names the inventory of the run that printed it.
    assert said(r, "ansible-playbook -i inventory/lab/hosts.yml playbooks/gate-cutover.yml -e vllm_fleet_confirm=gate")
    assert endpoint_env() == before


# What the gate cutover's test hands the direct cutover's: the official client's suite
# through the gate, the gate's URL and its molecule scenario's run.
VIA_GATE: dict = {}


def test_the_gate_cutover_under_load_has_zero_errors_and_zero_fallbacks(client, play):
    """The cutover toward gate mode and its rerun under load; the lab stays in gate mode for
    the hold test below, and the direct cutover's test after it brings it back."""
    since = now_ts()
    r = play("playbooks/gate-cutover.yml", "-e", "vllm_fleet_confirm=gate")
    assert r.rc == 0
    assert "VLLM_FLEET_MODE=gate" in endpoint_env()
    assert "serving mode: gate" in r.stdout
    # Already in gate mode: nothing changes.
    again = play("playbooks/gate-cutover.yml", "-e", "vllm_fleet_confirm=gate")
    assert again.rc == 0 and again.changed() == {}
    wait_for(lambda: summary(since)["by_mode"].get("gate", {}).get("ok", 0) >= 5, 60, "answers through the gate")
    # An application sees the same API through the gate as from the engine:
    # the official client's suite, here and again after the cutover back.
    VIA_GATE["url"], model, gate_key = consumer_endpoint()
    VIA_GATE["suite"] = run_suite(VIA_GATE["url"], model, gate_key)
    # gate_service's scenario on the gate the two runs above started (its converge and
    # idempotence), under load: its verify. Checked after the cutover back, so
    # that a failure leaves the lab in direct mode for the next tests.
    VIA_GATE["scenario"] = RAN_THERE["gate_service"] = molecule_test("gate_service", short=True, timeout=600)
    s = summary(since)
    assert s["outcomes"].get("fallback", 0) == 0, s
    assert s["outcomes"].get("error", 0) == 0, s
    assert s["by_mode"]["gate"]["ok"] > 0


def client_summary(log: str) -> dict:
    return json.loads(on_host("lab3", f"python3 /opt/vllm-fleet/consumer/session_client.py --summary {log}"))


def test_gate_mode_one_engine_the_hold_loses_no_request(client, play, tmp_path):
    """playbooks/rolling-restart.yml in gate mode, the only engine (in the gate-mode window the
    cutover above opened): the gate holds admissions for the restart plus a margin (within its
    queue timeout), requests queue there and go through once the engine is back: zero failed
    requests. The client here waits as long as the hold (its own timeout 150 s; the lab's
    service gives up after 30 s and would fall back)."""
    assert "VLLM_FLEET_MODE=gate" in endpoint_env(), "the gate cutover's test leaves the lab in gate mode"
    log = "/var/log/vllm-fleet/hold-run.jsonl"
    on_host("lab3", f"systemctl stop {CLIENT}")
    try:
        on_host("lab3", f"rm -f {log}; nohup python3 /opt/vllm-fleet/consumer/session_client.py --timeout 150"
                        f" --duration 600 --log {log} --quiet >/dev/null 2>&1 &")
        wait_for(lambda: client_summary(log)["outcomes"].get("ok", 0) >= 3, 60, "answers through the gate")
        r, report = restart(play, tmp_path, "-e", "restart_policy=always")
        assert r.rc == 0
        (engine,) = report["engines"]
        assert engine["outcome"] == "restarted" and engine["drain"] == "gate-hold", engine
        assert said(r, "the only serving engine: the gate holds admissions for 90 s")
        done = client_summary(log)["records"]
        wait_for(lambda: client_summary(log)["records"] >= done + 3, 120, "answers after the release")
    finally:
        on_host("lab3", f"pkill -f {log}")
        on_host("lab3", f"systemctl start {CLIENT}")
    s = client_summary(log)
    assert s["outcomes"].get("error", 0) == 0 and s["outcomes"].get("fallback", 0) == 0, s
    # Some requests waited out the restart in the gate's queue.
    assert s["latency_ms"]["ok"]["max"] > 20000, s["latency_ms"]


def test_the_direct_cutover_under_load_has_zero_errors_and_zero_fallbacks(client, play):
    """The cutover back to direct mode and its rerun under load: the gate archived with its
    files kept, and the official client's suite the same from the engine as through the gate."""
    since = now_ts()
    r = play("playbooks/direct-cutover.yml", "-e", "vllm_fleet_confirm=direct")
    assert r.rc == 0
    assert "VLLM_FLEET_MODE=direct" in endpoint_env()
    assert "gate: archived" in r.stdout
    assert on_host("lab3", "systemctl is-enabled vllm-fleet-gate.service").strip() == "disabled"
    assert on_host("lab3", "test -f /etc/vllm-fleet/gate.json && echo kept").strip() == "kept"
    again = play("playbooks/direct-cutover.yml", "-e", "vllm_fleet_confirm=direct")
    assert again.rc == 0 and again.changed() == {}
    mark = now_ts()
    wait_for(lambda: summary(mark)["by_mode"].get("direct", {}).get("ok", 0) >= 5, 60, "answers from the engine")
    direct_url, model, engine_key = consumer_endpoint()
    assert direct_url != VIA_GATE["url"]
    assert run_suite(direct_url, model, engine_key) == VIA_GATE["suite"]

    s = summary(since)
    assert s["outcomes"].get("fallback", 0) == 0, s
    assert s["outcomes"].get("error", 0) == 0, s
    assert s["by_mode"]["direct"]["ok"] > 0
    assert_scenario_passed("gate_service", VIA_GATE["scenario"], short=True)


def engine_requests() -> float:
    """Requests running or waiting on the engine."""
    counts = engine_metrics()
    return counts.get("num_requests_running", 0) + counts.get("num_requests_waiting", 0)


def test_a_cutover_with_a_wedged_engine_leaves_the_consumers_where_they_were(client, play):
    # The session client is stopped, and the engine idle, before the wedge: a request stopped
    # between its scheduling and its first token counts the whole wedge as its prefill time, and
    # the watch's passive prefill rule then pages for its 2-minute window, which test_watch.py's
    # quiet proof reads (a fault this test made, not the engine's). The proof here is the
    # consumers' files, which need no load.
    on_host("lab3", f"systemctl stop {CLIENT}")
    wait_for(lambda: engine_requests() == 0, 60, "the engine idle once the session client stopped")
    before = endpoint_env()
    lab_sh("fault", "wedge", "lab1")
    try:
        r = play("playbooks/gate-cutover.yml", "-e", "vllm_fleet_confirm=gate",
                 "-e", "serving_cutover_probe_timeout=10")
        assert r.rc != 0
    finally:
        lab_sh("fault", "unwedge", "lab1")
        on_host("lab3", f"systemctl start {CLIENT}")
    assert endpoint_env() == before
    assert on_host("lab3", "systemctl is-active vllm-fleet-gate.service").strip() != "active"
    since = now_ts()
    wait_for(lambda: summary(since)["outcomes"].get("ok", 0) >= 3, 60, "the client's answers again")


def mode_record() -> dict:
    """The serving mode recorded on the consumer host, as Ansible reads its local fact (a
    script that reads the endpoint file)."""
    return json.loads(on_host("lab3", "/etc/ansible/facts.d/vllm_fleet.fact"))


def the_consumers_are_served_where_their_record_says(mode: str) -> None:
    """Every consumer's endpoint file and mode record say ``mode``, and what they point at answers."""
    base_url, _, _ = consumer_endpoint()
    assert f"VLLM_FLEET_MODE={mode}" in endpoint_env()
    assert mode_record() == {"mode": mode, "base_url": base_url}, mode_record()
    mark = now_ts()
    wait_for(lambda: summary(mark)["by_mode"].get(mode, {}).get("ok", 0) >= 3, 60, f"answers in {mode} mode")


def test_the_gate_killed_during_a_cutover_then_while_serving_then_the_controller_interrupted(client, play, tmp_path):
    """Three faults in the cutovers' own order, under load.

    1. The gate killed (kill -9) as the cutover toward gate mode sends its canary through it.
       Expected: no consumer is left on a path that does not answer: either the canary fails, the
       gate is archived again and the run fails saying no consumer moved, or systemd restarted the
       gate in time and the cutover completes. Either way the endpoint files, the mode record and
       what answers agree.
    2. The gate killed while serving: systemd restarts it at once; the application's fallbacks
       measure the outage.
    3. The controller interrupted (Ctrl-C) in the cutover back to direct mode, just after the
       consumers moved. Expected: the run exits non-zero saying so; the consumers are served by the
       engine; a rerun converges (the gate archived, the record direct)."""
    since = now_ts()
    out = tmp_path / "gate-cutover.log"
    run = start_playbook("playbooks/gate-cutover.yml", "-e", "vllm_fleet_confirm=gate", out=out)
    try:
        wait_for(lambda: "Gate up | Send a canary through the gate" in out.read_text(), 300, "the gate's canary")
        lab_sh("fault", "kill-gate", "lab3")
    finally:
        rc = finish(run, timeout=300)
    text = out.read_text()
    if rc == 0:
        print("fault kill-gate during the cutover: systemd restarted the gate in time; the cutover completed")
        the_consumers_are_served_where_their_record_says("gate")
    else:
        print("fault kill-gate during the cutover: the canary failed; the gate is archived again")
        assert "no consumer was moved" in " ".join(text.split()), text[-3000:]
        assert on_host("lab3", "systemctl is-active vllm-fleet-gate.service").strip() != "active"
        the_consumers_are_served_where_their_record_says("direct")
        assert play("playbooks/gate-cutover.yml", "-e", "vllm_fleet_confirm=gate").rc == 0
    s = summary(since)
    assert s["outcomes"].get("error", 0) == 0, s

    pid_before = on_host("lab3", "systemctl show -p MainPID --value vllm-fleet-gate.service").strip()
    since = now_ts()
    lab_sh("fault", "kill-gate", "lab3")
    wait_for(lambda: on_host("lab3", "systemctl show -p MainPID --value vllm-fleet-gate.service").strip()
             not in ("0", pid_before)
             and gate_health() == "200",
             60, "systemd to restart the gate")
    mark = now_ts()
    wait_for(lambda: summary(mark)["by_mode"].get("gate", {}).get("ok", 0) >= 3, 60,
             "answers through the restarted gate")
    s = summary(since)
    print(f"fault kill-gate: {s['outcomes'].get('error', 0)} failed, {s['outcomes'].get('fallback', 0)} fell back,"
          f" outage as the application saw it {s['longest_fallback_run_s']} s")
    assert s["outcomes"].get("error", 0) == 0, s
    # Requests that met the dead gate went to the fallback model; the
    # longest run of them is the outage as the application saw it.
    assert s["outcomes"].get("fallback", 0) >= 1, s
    assert 0 < s["longest_fallback_run_s"] < 30, s

    since = now_ts()
    out = tmp_path / "direct-cutover.log"
    run = start_playbook("playbooks/direct-cutover.yml", "-e", "vllm_fleet_confirm=direct", out=out)
    try:
        wait_for(lambda: "VLLM_FLEET_MODE=direct" in endpoint_env(), 300, "the consumers in direct mode")
        interrupt(run)
    finally:
        rc = finish(run, timeout=120)
    text = out.read_text()
    assert was_interrupted(rc, text), text[-3000:]
    mark = now_ts()
    wait_for(lambda: summary(mark)["by_mode"].get("direct", {}).get("ok", 0) >= 3, 60, "answers after the interrupt")
    # The record reads the endpoint file: it cannot lag it, even after an interrupt between
    # two tasks (it used to say gate here).
    the_consumers_are_served_where_their_record_says("direct")
    r = play("playbooks/direct-cutover.yml", "-e", "vllm_fleet_confirm=direct")
    assert r.rc == 0 and "gate: archived" in r.stdout
    assert on_host("lab3", "systemctl is-enabled vllm-fleet-gate.service").strip() == "disabled"
    the_consumers_are_served_where_their_record_says("direct")
    s = summary(since)
    assert s["outcomes"].get("error", 0) == 0 and s["outcomes"].get("fallback", 0) == 0, s
    # The two cutovers' own output (the gate's tokens and the engine's key pass through them).
    assert files_holding(tmp_path, secret_values()) == []
