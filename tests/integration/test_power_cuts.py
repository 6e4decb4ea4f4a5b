"""Power cuts: the engine serves again by itself once its hosts are back (docs/provisioning.md,
"After a power cut"; the figures in docs/faults.md).

Runs after test_diagnose.py, which leaves the lab's TP2 engine over Ray serving (the field's
small pool), and before test_security.py, which reads every host's journal and listeners after
these boots too. The host-stop knob is a power loss: the link goes down and PID 1 gets SIGKILL,
/run is lost, the disk is kept. In order:

1. lab1 and lab2 together: the head's boot run waits for lab2, starts the Ray head, waits until
   lab2's node joined, starts vLLM; lab2's boot run joins once the head's Ray port answers.
2. lab2 alone (the worker): the head's vLLM stays up with its engine dead (/health 503), and
   its check says it waits for lab2; once lab2's node rejoined, the check restarts the whole
   engine.
3. lab1 alone (the head): lab2's Ray node gives up on its lost head (Ray's own GCS reconnect
   timeout); the head's boot run waits for it to join again, which lab2's check does once the
   head's Ray port answers.
4. Left alone: the engine's Ray worker killed (`fault kill-ray-worker`, no host booted): the
   head's check sees /health 503 with the same Ray nodes and restarts nothing.
5. A rolling restart during a recovery (lab1 and lab2 cut again, the engine still dead): the
   run takes the lease, stops the head's recovery run where it is, restarts the engine itself
   and gives the lease back; the recovery starts nothing while the run holds it, and its check
   takes the engine up as served afterwards.

Cuts 1 to 3 come one right after the other, as the field's do: each recovery run records the Ray
nodes the engine serves with as it sees it serve, so the next cut needs no check between.
Each recovery prints the seconds from power back to the first completion the official openai
client gets, and the head's starts of vllm.service since the cut.
"""
from __future__ import annotations

import json
import time

import pytest
from labtools import engine_key, invocation, lab_sh, on_host, said
from test_diagnose import BASE_URL
from test_serving_modes import wait_for

pytestmark = pytest.mark.lab

HEAD, WORKER = "lab1", "lab2"
RECOVER_UNITS = "-u vllm-fleet-recover.service -u vllm-fleet-recover-check.service"
# A generous ceiling for one recovery on the lab's two cores (a boot is 20-50 s here); the
# figure printed is what it took.
RECOVERY_TIMEOUT_S = 600


def host_clock() -> float:
    """The lab hosts' clock (they share the kernel's), for journalctl --since."""
    return float(on_host(HEAD, "date +%s.%N").strip())


def journal(host: str, units: str, since: float) -> str:
    return on_host(host, f"journalctl {units} --since @{since:.0f} -o cat --no-pager")


def recovery_lines(host: str, since: float) -> str:
    return journal(host, RECOVER_UNITS, since)


def server_starts(since: float) -> int:
    """The head's starts of vllm.service since ``since`` (systemd's own "Started" lines)."""
    return sum(1 for line in journal(HEAD, "-u vllm.service", since).splitlines() if line.startswith("Started "))


def completion() -> bool:
    """One token from the engine through the official client, as an application asks."""
    import openai

    client = openai.OpenAI(base_url=BASE_URL + "/v1", api_key=engine_key(), timeout=10, max_retries=0)
    try:
        return client.completions.create(model="tiny", prompt="ping", max_tokens=1).usage.completion_tokens == 1
    except (openai.APIError, OSError):
        return False


def first_completion_after(t0: float, what: str) -> float:
    """Seconds from ``t0`` (time.monotonic) to the first completion; progress on the way."""
    deadline, said_at = t0 + RECOVERY_TIMEOUT_S, t0
    while time.monotonic() < deadline:
        if completion():
            return time.monotonic() - t0
        if time.monotonic() - said_at >= 30:
            said_at = time.monotonic()
            print(f"  {what}: no completion yet after {said_at - t0:.0f} s", flush=True)
        time.sleep(1)
    raise AssertionError(f"{what}: no completion within {RECOVERY_TIMEOUT_S} s of power back:\n"
                         f"{HEAD}: {recovery_lines(HEAD, 0)[-3000:]}\n{WORKER}: {recovery_lines(WORKER, 0)[-2000:]}")


def recoveries_settled() -> bool:
    """No boot recovery run under way on an engine host (vllm-fleet-recover.service ended)."""
    return all(on_host(host, "systemctl is-active vllm-fleet-recover.service").strip() in ("inactive", "failed")
               for host in (HEAD, WORKER))


def power_cut(*hosts: str, off_until=None, what: str = "") -> tuple[float, float]:
    """Cut the power of ``hosts`` and bring it back once ``off_until(since)`` holds (a real cut lasts
    longer than the lab's one second: the hosts that stayed up notice it first); (the hosts'
    clock at the cut, monotonic at power back). Each cut starts once the recoveries of the one
    before have ended: a worker's run from the cut above that has not yet seen the engine serve
    (it polls) would take this cut's stop of its Ray for its own failed attempt (seen once: a
    60 s back-off, and the check's path never ran)."""
    wait_for(recoveries_settled, 120, "the recovery runs of the cut above to end")
    since = host_clock()
    for host in hosts:
        lab_sh("fault", "host-stop", host)
    if off_until is not None:
        wait_for(lambda: off_until(since), 180, what)
    t0 = time.monotonic()
    for host in hosts:
        lab_sh("fault", "host-start", host)
    return since, t0


def nodes_recorded(since: float) -> bool:
    return "recorded its 2 Ray node(s)" in recovery_lines(HEAD, since)


def served_and_recorded(since: float) -> bool:
    """The head's recovery run recorded the engine's Ray nodes as it saw it serve again, in the
    same line: the next cut may come at once (the field's cuts in a row), no check between."""
    return any("the engine serves again" in line and "recorded its 2 Ray node(s)" in line
               for line in recovery_lines(HEAD, since).splitlines())


def state() -> dict:
    return json.loads(on_host(HEAD, "cat /var/lib/vllm-fleet/recover-state.json") or "{}")


def report(case: str, seconds: float, since: float) -> None:
    starts = server_starts(since)
    print(f"power cut of {case}: first completion {seconds:.0f} s after power back;"
          f" the head started vllm.service {starts} time(s)")
    assert starts == 1, f"{case}: the head started vllm.service {starts} times:\n{recovery_lines(HEAD, since)}"


def test_both_engine_hosts_cut_the_engine_serves_again_by_itself():
    assert completion(), "the engine test_diagnose.py left does not serve"
    since, t0 = power_cut(HEAD, WORKER)
    seconds = first_completion_after(t0, "lab1 and lab2")
    # The client may be served before the recovery's next look logs it (every 5 s).
    wait_for(lambda: "the engine serves again" in recovery_lines(HEAD, since), 60, "the head's recovery done")
    head = recovery_lines(HEAD, since)
    assert head.index("every node joined: starting vLLM") < head.index("the engine serves again"), head
    assert "starting ray.service" in recovery_lines(WORKER, since), recovery_lines(WORKER, since)
    report("lab1 and lab2", seconds, since)
    # The nodes this start serves with, recorded by the run that brought it back (what tells the
    # next cut's booted host): the next cut comes at once, as the field's second night did.
    assert served_and_recorded(since), recovery_lines(HEAD, since)


def test_the_worker_alone_cut_the_heads_check_restarts_the_whole_engine():
    assert completion(), "the engine the test above left does not serve"
    since, t0 = power_cut(WORKER, off_until=lambda since: "do not answer: waiting for their hosts to boot"
                          in recovery_lines(HEAD, since), what="the head's check noticing lab2 away")
    seconds = first_completion_after(t0, "lab2 alone")
    wait_for(lambda: "the engine serves again" in recovery_lines(HEAD, since), 60, "the head's recovery done")
    head = recovery_lines(HEAD, since)
    assert "rejoined after vLLM started (their host booted)" in head, head
    assert "restarting the whole engine" in head, head
    # The head's new Ray drops lab2's node: lab2 joins it again at once, not after Ray's own timeout.
    worker = recovery_lines(WORKER, since)
    assert "restarting ray.service" in worker or "starting ray.service again" in worker, worker
    report("lab2 alone", seconds, since)
    # The nodes this start serves with, recorded by the run that brought it back (what tells the
    # next cut's booted host): the next cut comes at once, as the field's second night did.
    assert served_and_recorded(since), recovery_lines(HEAD, since)


def test_the_head_alone_cut_waits_for_the_workers_node_then_serves():
    assert completion(), "the engine the test above left does not serve"
    since, t0 = power_cut(HEAD, off_until=lambda since: on_host(WORKER, "systemctl is-active ray.service").strip()
                          != "active", what="lab2's Ray node giving up on its lost head")
    seconds = first_completion_after(t0, "lab1 alone")
    wait_for(lambda: "the engine serves again" in recovery_lines(HEAD, since), 60, "the head's recovery done")
    head = recovery_lines(HEAD, since)
    assert head.index("every node joined: starting vLLM") < head.index("the engine serves again"), head
    assert "the head waits for its nodes" in recovery_lines(WORKER, since), recovery_lines(WORKER, since)
    report("lab1 alone", seconds, since)
    # The nodes this start serves with, recorded by the run that brought it back (what tells the
    # next cut's booted host): the next cut comes at once, as the field's second night did.
    assert served_and_recorded(since), recovery_lines(HEAD, since)


def test_a_killed_ray_worker_is_left_alone():
    """No host booted: the same Ray nodes, so the check leaves the dead engine to the operator's
    rolling restart (docs/provisioning.md: the trigger is a boot, never a symptom)."""
    server = invocation(HEAD, "vllm.service")
    since = host_clock()
    lab_sh("fault", "kill-ray-worker", WORKER)
    wait_for(lambda: "every Ray node is the one it started with" in recovery_lines(HEAD, since), 180,
             "the head's check reading the dead engine as not its own to restart")
    assert invocation(HEAD, "vllm.service") == server, "the check restarted an engine no boot broke"
    assert not completion()
    assert state()["last_action"] == "done", state()


def test_a_rolling_restart_during_a_recovery_takes_over_and_the_recovery_stands_aside(play, tmp_path):
    since, t0 = power_cut(HEAD, WORKER)
    wait_for(lambda: "starting the Ray head" in recovery_lines(HEAD, since), 180, "the head's recovery under way")
    r = play("playbooks/rolling-restart.yml", "-e", "restart_policy=always",
             "-e", f"vllm_restart_report_path={tmp_path / 'restart.json'}")
    assert r.rc == 0, r.stdout[-4000:]
    served = invocation(HEAD, "vllm.service")
    head = recovery_lines(HEAD, since)
    assert "Stopping vllm-fleet-recover.service" in head or "a playbook holds the lease" in head, head
    assert completion()
    assert on_host(HEAD, "test -e /run/vllm-fleet/lease.json && echo held").strip() == "", "the run kept the lease"
    # The check takes the playbook's engine up as served: it records its nodes, restarts nothing.
    wait_for(lambda: nodes_recorded(since), 120, "the head's check recording the playbook's engine")
    assert invocation(HEAD, "vllm.service") == served
    assert said(r, "engine_lab")
    print(f"a rolling restart during the recovery: served {time.monotonic() - t0:.0f} s after power back")
