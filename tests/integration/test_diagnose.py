"""The field story, reproduced: playbooks/diagnose.yml tells a full KV pool
from a degraded engine, a preempting one and a wedged one.

Runs last of the engine tests in `make test` (after test_backends.py's mp
backend, which its engine play takes back to Ray): it runs the lab engine
with the field's 2.31 sessions' pool, and leaves it so; `site.yml` puts the
inventory's engine back. The preempting case (full-prompt admission off) is
test_backends.py's mp boot.

The engine here: the lab's TP2 engine with --num-gpu-blocks-override 37
(37 blocks x 128 = 4,736 tokens = 2 sessions of 2,048) and 512-token
prefill chunks, so an admitted prompt grows by chunks as a long one does on
a GPU. Sessions are the official openai client, as an application would
send them: 1,900-token prompts and 100-token answers (ignore_eos), each with
its own cache_salt, three at once.
"""
from __future__ import annotations

import base64
import json
import re
import secrets
import threading
import time
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest
from labtools import (
    HUB_A,
    HUB_B,
    HUB_CUT,
    engine_key,
    engine_metrics,
    fake_hub_down,
    fake_hub_up,
    hub_folder,
    hub_requests,
    hub_vars,
    invocation,
    lab_args,
    lab_sh,
    on_host,
    said,
    stop_engines,
)
from test_heal import PROMETHEUS, firing, healing_loop, loop_restart_settled
from test_serving_modes import an_application_from_the_endpoint_file, consumer_endpoint, wait_for

BASE_URL = "http://10.200.0.11:8000"
# The engine runs the lab's hub model at its second revision here (test_backends.py's mp boot
# ran the first): every engine play of this file names it, so none changes the model.
SMALL_POOL = dict(lab_args(num_gpu_blocks_override=37, max_num_batched_tokens=512), **hub_vars(HUB_B))
RESERVE_OFF = lab_args(num_gpu_blocks_override=37, max_num_batched_tokens=512, scheduler_reserve_full_isl=False)
# The tiny model answers one token in well under a second, even with three sessions running:
# a wedged engine is one that gives none in 5 s (the defaults' 20 s suit a large model).
WEDGED_AFTER = {"vllm_diagnose_timeout_s": 5, "vllm_verify_generate_timeout_s": 5}
SESSION_PROMPT_TOKENS = 1900
SESSION_MAX_TOKENS = 100

pytestmark = pytest.mark.usefixtures("small_pool")


def two_one_host_engines() -> bool:
    """Whether lab2 serves an engine of its own (test_restart.py's two-engine shape)."""
    return "--headless" not in on_host("lab2", "ps -eo args") and \
        on_host("lab2", "systemctl is-active vllm.service").strip() == "active"


@pytest.fixture(scope="module")
def small_pool(play):
    """The lab's TP2 engine over Ray started with the field's pool by site.yml's engine play,
    from the shape the earlier tests left: in `make test`, test_backends.py's mp backend with
    full-prompt admission off (the play switches it back to Ray itself, a changed flag on a
    running engine); run after test_restart.py alone, its two one-host engines, stopped first
    (moving hosts between engines, docs/provisioning.md).

    The same play changes the hub model's revision (test_backends.py's mp boot ran the first):
    it downloads into the new revision's own folder, with the lab's hub cutting the largest
    file once past hf's first 10 MiB chunk, so hf resumes it with a Range request in the same
    run; the engine restarts onto the new folder, and the old one is kept. The hub stays up
    for this file: a later engine play must make no request of it."""
    if two_one_host_engines():
        stop_engines()
    fake_hub_up(cut_after=HUB_CUT)
    since = time.time()
    before = {"head": invocation("lab1", "vllm.service"), "headless": "--headless" in on_host("lab2", "ps -eo args")}
    # The model changes (the hub's second revision) on a serving engine: the outage accepted, as
    # the reshape from the mp backend is one anyway (an upgrade switches a model drained).
    r = play("playbooks/engine.yml", extravars=dict(SMALL_POOL, vllm_install_restart_serving=True))
    assert r.rc == 0, "the small-pool engine did not start and verify"
    r.before = before
    assert f"vllm serve {hub_folder(HUB_B)} " in on_host("lab1", "ps -eo args")
    assert on_host("lab1", f"test -e {hub_folder(HUB_A)}/.vllm-fleet-download.json && echo kept").strip() == "kept"
    padding = [q for q in hub_requests(since) if q["method"] == "GET" and q["path"].endswith("/padding.bin")]
    print(f"hub: the largest file's GETs {[(q['status'], q['range'], q['bytes']) for q in padding]}")
    assert (200, None, HUB_CUT) in [(q["status"], q["range"], q["bytes"]) for q in padding], padding
    assert (206, "bytes=10485760-") in [(q["status"], q["range"]) for q in padding], "hf did not resume the cut file"
    yield r
    fake_hub_down()


def firing_for_cure() -> bool:
    """Whether any alert a restart may cure (fleet_cure="restart") fires now."""
    q = urllib.parse.urlencode({"query": 'ALERTS{fleet_cure="restart",alertstate="firing"}'})
    with urllib.request.urlopen(f"{PROMETHEUS}/query?{q}", timeout=10) as r:
        return bool(json.load(r)["data"]["result"])


def diagnose(play, tmp_path: Path, *args: str, extravars: dict | None = None) -> dict:
    """Run playbooks/diagnose.yml; return the lab engine's verdict from the JSON report."""
    report = tmp_path / "diagnose.json"
    r = play("playbooks/diagnose.yml", *args,
             extravars=dict(extravars or {}, vllm_diagnose_report_path=str(report)))
    assert r.rc == 0, "diagnose.yml failed"
    assert r.changed() == {}, "diagnose.yml changed something"
    (engine,) = json.loads(report.read_text())["engines"]
    engine["stdout"] = r.stdout
    return engine


def scrape() -> dict:
    """running, waiting and preemptions from the head's /metrics."""
    return engine_metrics(BASE_URL)


class Sessions:
    """N full-context chat sessions through the openai client, each resent as soon as it finishes."""

    def __init__(self, n: int = 3):
        import openai

        self.client = openai.OpenAI(base_url=BASE_URL + "/v1", api_key=engine_key(), timeout=120, max_retries=0)
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.done = 0
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True) for i in range(n)]
        # Counted by the engine's own /tokenize; the same words every session, a cache_salt each.
        from ansible.module_utils.prefill.client import EngineClient

        with EngineClient(BASE_URL) as engine:
            self.prompt, counted = engine.build_prompt("tiny", SESSION_PROMPT_TOKENS)
        assert counted > SESSION_PROMPT_TOKENS - 20, counted

    def run(self, i: int) -> None:
        while not self.stop.is_set():
            try:
                r = self.client.completions.create(
                    model="tiny", prompt=self.prompt, max_tokens=SESSION_MAX_TOKENS, temperature=0,
                    extra_body={"ignore_eos": True, "cache_salt": secrets.token_hex(8)})
                assert r.usage.completion_tokens == SESSION_MAX_TOKENS
                self.done += 1
            except Exception as exc:  # noqa: BLE001 (every error is a finding; the test asserts none)
                self.errors.append(f"session {i}: {type(exc).__name__}: {exc}")
                return

    def __enter__(self) -> Sessions:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=180)

    def wait_for(self, condition, what: str, timeout: float = 120) -> dict:
        """Poll /metrics until ``condition(metrics)``; fail after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = scrape()
            if condition(m):
                return m
            assert not self.errors, self.errors
            time.sleep(0.2)
        pytest.fail(f"no {what} within {timeout} s: last /metrics {m}, errors {self.errors}")


def test_the_engine_runs_over_ray_again(small_pool):
    """From the mp backend test_backends.py leaves (full-prompt admission off), the engine play
    went back to Ray, the production path, with the flag back on: a changed flag restarts the
    whole engine, the head's server and the worker with it; the worker now serves through its
    Ray node (a RayWorkerProc), no headless rank."""
    if small_pool.before["headless"]:  # from test_backends.py's mp engine (in `make test`)
        # Ansible names the hosts of an include in the order their results came back.
        included = re.findall(r"included: \S+/vllm_server/tasks/restart\.yml for (\w+(?:, \w+)*)", small_pool.stdout)
        assert [sorted(hosts.split(", ")) for hosts in included] == [["lab1", "lab2"]], \
            f"the changed flag did not restart the whole engine (restart.yml included for: {included})"
        assert invocation("lab1", "vllm.service") != small_pool.before["head"], "the head's server was not restarted"
        assert on_host("lab2", "systemctl is-active vllm.service").strip() != "active", "the headless rank still runs"
    assert "RayWorkerProc" in on_host("lab2", "ps -eo args")
    assert "--headless" not in on_host("lab2", "ps -eo args")
    assert on_host("lab2", "systemctl is-active ray.service").strip() == "active"


def test_the_report_states_the_fields_pool(play, tmp_path):
    """1. The seed's pool: 4,736 tokens, 2 full-context sessions; quiet, the engine is healthy."""
    v = diagnose(play, tmp_path)
    assert v["evidence"]["kv_cache_tokens"] == 4736
    assert v["evidence"]["full_context_sessions"] == 2
    assert "4,736 tokens = 2 full-context session(s) of 2,048 tokens" in v["stdout"]
    assert v["verdict"] == "healthy", v


def test_a_wedged_engine_with_no_traffic_alerts_fails_readiness_and_verify_and_the_loop_cures_it(play, tmp_path):
    """5. /health answers while nothing generates (EngineCore stopped), in direct mode with no
    traffic. Expected: the diagnosis reads wedged; verify.yml and the engine's readiness
    (engine.yml, the same path as site.yml) each fail within a minute saying "wedged" and naming
    the cure. The watch's VllmEngineWedged fires within 2 minutes of the wedge (its canary, not
    the engine's frozen gauges), and the healing loop (proof 2, docs/watch.md) runs the cure, the
    rolling restart, which restarts it (consumers on the fallback meanwhile): it generates
    again and the cure ledger says cured."""
    # Measured from quiet: no alert a restart may cure is still firing from an earlier test.
    wait_for(lambda: not firing_for_cure(), 300, "no fleet_cure alert firing before the wedge")
    lab_sh("fault", "wedge", "lab1")
    wedged, wedged_at = time.monotonic(), datetime.now(UTC)
    alerted: list[float] = []
    watching = threading.Event()

    def watch_alert():
        while not watching.wait(2.0) and not alerted:
            if firing("VllmEngineWedged"):
                alerted.append(time.monotonic() - wedged)

    watcher = threading.Thread(target=watch_alert, daemon=True)
    watcher.start()
    try:
        v = diagnose(play, tmp_path, extravars=WEDGED_AFTER)
        assert v["verdict"] == "wedged", v
        assert v["evidence"]["health_status"] == 200
        mark = time.time()
        for playbook, extravars in (("playbooks/verify.yml", WEDGED_AFTER),
                                    ("playbooks/engine.yml", dict(SMALL_POOL, **WEDGED_AFTER))):
            start = time.monotonic()
            r = play(playbook, extravars=extravars)
            took = time.monotonic() - start
            print(f"{playbook} on a wedged engine: rc {r.rc} after {took:.0f} s")
            assert r.rc != 0, f"{playbook} passed a wedged engine"
            assert said(r, "is wedged: /health answers but a one-token completion got no answer in 5 s"), playbook
            # The command names the inventory of the run that printed it.
            assert said(r, "ansible-playbook -i inventory/lab/hosts.yml playbooks/rolling-restart.yml"), playbook
            assert took < 120, f"{playbook} took {took:.0f} s to say so"
        # The engine play's rerun of the downloaded revision asked the hub nothing (its marker).
        assert hub_requests(mark) == []
        # The loop, started now that the operator's runs are done, gets the alert from Alertmanager.
        with healing_loop(tmp_path) as loop:
            done, restarted = loop_restart_settled(loop, wedged_at)
        cured_s = time.monotonic() - wedged
    finally:
        watching.set()
        lab_sh("fault", "unwedge", "lab1", check=False)
    assert alerted, "VllmEngineWedged was not seen firing"
    print(f"proof 2: VllmEngineWedged fired {alerted[0]:.0f} s after the wedge; the ledger's outcome "
          f"{cured_s:.0f} s after it")
    assert alerted[0] <= 120 + 5, f"VllmEngineWedged fired {alerted[0]:.0f} s after the wedge (bound 120 s)"
    (entry,) = done
    assert entry["outcome"] == "cured" and entry["before"]["verdict"] == "wedged", entry
    (report,) = restarted
    (engine,) = report["engines"]
    assert engine["verdict"] == "wedged" and engine["outcome"] == "restarted", engine
    assert engine["drain"] == "fallback"
    print(f"wedged engine cured by the loop's rolling restart (down {engine['downtime_s']} s)")
    import openai

    client = openai.OpenAI(base_url=BASE_URL + "/v1", api_key=engine_key(), timeout=60, max_retries=0)
    assert client.completions.create(model="tiny", prompt="ping", max_tokens=1).usage.completion_tokens == 1
    # The lab's keys again after test_restart.py's keyless site: the restart moved the consumers
    # to the fallback and back, and their file holds the engine's key once more; an application
    # configured from the file alone is served.
    assert consumer_endpoint()[2] == engine_key()
    assert an_application_from_the_endpoint_file() == "1"


def test_three_sessions_the_third_waits_kv_bound(play, tmp_path):
    """2. Three full-context sessions: two run, the third waits, nothing is preempted or lost."""
    before = scrape()
    with Sessions(3) as s:
        s.wait_for(lambda m: m.get("num_requests_running") == 2 and m.get("num_requests_waiting", 0) >= 1,
                   "2 running and 1 waiting")
        v = diagnose(play, tmp_path)
    after = scrape()
    assert s.errors == [], s.errors
    assert s.done > 0
    assert after["num_preemptions_total"] == before["num_preemptions_total"]
    assert v["verdict"] == "kv-bound", v
    assert "4,736 tokens hold 2 full-context session(s)" in v["summary"]
    assert v["evidence"]["preemptions_in_window"] == 0


def test_other_traffic_reads_healthy_and_the_knob_under_it_degraded(play, tmp_path):
    """3. Issue 39: traffic unlike the seed's sessions (lab/traffic/shapes.py's mix, through the
    official openai client: a chat session on a cached prefix with 4-token turns, a decode-heavy
    session with 200-token answers, and bursts of fresh prompts) reads healthy, from the same
    fixed work as the baseline timed by the engine; under the same traffic the slow-prefill knob
    reads prefill-degraded. The passive rate misread both shapes (docs/diagnose.md, "Under load").
    Sized for the small pool: nothing waits, so the probe samples."""
    from shapes import Load

    mix = dict(prefix_words=300, burst=2, burst_words=100)
    with Load(BASE_URL, engine_key(), "mix", **mix) as load:
        wait_for(lambda: load.ok >= 20, 120, "the mix's first answers")
        healthy = diagnose(play, tmp_path)
        for host in ("lab1", "lab2"):
            lab_sh("fault", "slow-prefill", host)
        try:
            slowed = diagnose(play, tmp_path)
        finally:
            for host in ("lab1", "lab2"):
                lab_sh("fault", "slow-prefill-off", host, check=False)
    assert load.failed == 0, load.errors[:5]
    print(f"under the mix ({load.ok} answers): {healthy['verdict']} {healthy['evidence']['ratio']}x,"
          f" the knob {slowed['verdict']} {slowed['evidence']['ratio']}x (threshold"
          f" {slowed['evidence']['threshold']}, passive {healthy['evidence']['passive_ratio']}x healthy)")
    assert healthy["verdict"] == "healthy", healthy
    assert slowed["verdict"] == "prefill-degraded", slowed
    for v in (healthy, slowed):
        assert "timed by the engine" in v["summary"], v["summary"]


# A GPU host's nvidia-smi, as far as the diagnosis reads it: a real capture with SW Power Cap
# Active (tests/fixtures/gpu-field/nvidia-smi/, its source in the folder's README), printed by a
# stand-in on lab2 only; lab1 has none, as a host with no NVIDIA GPU.
FAKE_SMI = "/run/vllm-fleet-test/nvidia-smi"
POWER_CAP = (Path(__file__).resolve().parents[1] / "fixtures" / "gpu-field" / "nvidia-smi"
             / "02_rtx_q_power_temp_perf_sw_power_cap_ACTIVE_ollama6163.txt")


def test_slow_prefill_reads_degraded(play, tmp_path):
    """4. The slow-down: degraded with the ratio and uptime, and the restart named as the cure
    (test_restart.py proves the cure: the rolling restart under load). The same slow-down while
    a GPU of the engine throttles (issue 43: lab2's nvidia-smi says SW Power Cap Active) reads
    throttled: not restarted, and VllmGpuThrottled pages until the next diagnosis."""
    capture = base64.b64encode(POWER_CAP.read_bytes()).decode()
    on_host("lab2", f"mkdir -p {Path(FAKE_SMI).parent} && echo {capture} | base64 -d > {FAKE_SMI}.txt"
                    f" && printf '#!/bin/sh\\ncat {FAKE_SMI}.txt\\n' > {FAKE_SMI} && chmod 755 {FAKE_SMI}")
    for host in ("lab1", "lab2"):
        lab_sh("fault", "slow-prefill", host)
    try:
        hot = diagnose(play, tmp_path, extravars={"vllm_diagnose_nvidia_smi": FAKE_SMI})
        wait_for(lambda: firing("VllmGpuThrottled"), 60, "VllmGpuThrottled from the throttled verdict")
        on_host("lab2", f"rm -rf {Path(FAKE_SMI).parent}")
        v = diagnose(play, tmp_path)
        wait_for(lambda: not firing("VllmGpuThrottled"), 60, "VllmGpuThrottled to clear after the next diagnosis")
    finally:
        for host in ("lab1", "lab2"):
            lab_sh("fault", "slow-prefill-off", host, check=False)
        on_host("lab2", f"rm -rf {Path(FAKE_SMI).parent}")
    assert hot["verdict"] == "throttled", hot
    assert "while the GPU throttles: lab2: GPU 00000000:0B:00.0: SW Power Cap active at 77 C" in hot["summary"]
    assert "not restarted: a restart cools the GPU" in hot["advice"][0]
    assert hot["gpu"]["lab1"]["present"] is False and "not an NVIDIA host" in hot["gpu"]["lab1"]["reason"]
    assert v["verdict"] == "prefill-degraded", v
    assert v["evidence"]["ratio"] >= v["evidence"]["threshold"]
    assert "of uptime" in v["summary"] and "a restart cures this" in v["advice"][0]
    assert "playbooks/rolling-restart.yml" in v["advice"][0]


def test_check_mode_changes_nothing(play, tmp_path):
    report = tmp_path / "check.json"
    r = play("playbooks/diagnose.yml", "--check", extravars={"vllm_diagnose_report_path": str(report)})
    assert r.rc == 0 and r.changed() == {}
    assert not report.exists(), "check mode wrote the report"
