"""site.yml with a worker down, then vLLM's own multi-node backend (mp), on the lab.

Runs after test_restart.py, which leaves the lab as two one-host engines, and
before test_diagnose.py, whose engine play takes the lab back to Ray with the
field's pool. So one engine play reshapes the lab from two engines into the
mp backend, with the field's small pool and full-prompt admission off (the
diagnosis' preempting case), and the next one puts Ray back: no boot only
resets state (docs/lab.md: the budget).
"""
from __future__ import annotations

import re
import time

import pytest
from labtools import (
    HUB_A,
    engine_key,
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
from test_diagnose import BASE_URL, RESERVE_OFF, Sessions, diagnose, scrape

pytestmark = pytest.mark.lab


def head_peers() -> str:
    """The hosts the head's Ray firewall admits (its nftables set)."""
    return on_host("lab1", "nft list set inet vllm_fleet_ray peers4")


def test_a_down_worker_stops_the_play_before_any_restart(play):
    """lab2 powered off: site.yml, with a flag that would restart the engine, names lab2 and
    changes nothing; the head keeps running. (The engine lab2 belongs to in the inventory is the
    TP2 one; the lab runs test_restart.py's two engines here, and the preflight stops the play
    before it would look at either.)"""
    head_before = invocation("lab1", "vllm.service")
    assert head_before, "no server ran on lab1 before the test"
    lab_sh("fault", "host-stop", "lab2")
    try:
        r = play("site.yml", extravars=lab_args(max_num_seqs=4))
        assert r.rc != 0
        assert "lab2" in r.stdout and "Nothing was changed" in r.stdout
        assert invocation("lab1", "vllm.service") == head_before, "the head was restarted without its worker"
    finally:
        lab_sh("fault", "host-start", "lab2")


def test_the_mp_backend_serves_tp2_across_two_hosts_and_reserve_off_is_refused_and_reads_preempting(
        play, tmp_path):
    """The alternative backend: vLLM's own multi-node mode (--nnodes, a --headless worker), no
    Ray, from the two one-host engines (stopped first: moving hosts between engines,
    docs/provisioning.md). test_diagnose.py's engine play takes it back to Ray, the production
    path.

    The same boot is the diagnosis' third case (field story 3): the field's small pool with
    full-prompt admission off (--no-scheduler-reserve-full-isl). The flags check reads the
    running engine's flags and refuses it, and under three sessions the engine preempts; the
    diagnosis names the flag. (Its changed-flag restart of the whole engine, the worker's Ray
    node with it, is test_diagnose.py's engine play from this engine back to Ray.)

    The two engines left the head's Ray firewall admitting only itself; the mp ranks pair over
    the same ephemeral ports, so the run must render it for both hosts before the worker
    connects (it once did not, and the worker's Gloo connections were reset)."""
    import openai

    assert not {"10.200.0.12", "10.201.0.12"} & set(head_peers().replace(",", " ").split()), \
        "the two one-host engines should have left lab1 admitting only itself"
    stop_engines()
    # The model from a hub (the lab's, lab/hub) at a pinned revision: a wrong token first.
    fake_hub_up()
    unit = on_host("lab1", "systemctl cat vllm.service")
    wrong = "hf_wrong-token-for-the-lab-hub"
    r = play("playbooks/engine.yml", extravars=dict(RESERVE_OFF, vllm_server_backend="mp", **hub_vars(HUB_A),
                                                    vllm_install_hf_token=wrong))
    assert r.rc != 0
    assert said(r, f"Downloading hub:lab/tiny at revision {HUB_A} from http://10.200.0.13:8090"), r.stdout[-3000:]
    assert said(r, "the hub refused the token (HTTP 401/403)")
    assert said(r, "The engine was not changed. Then rerun: ansible-playbook -i inventory/lab/hosts.yml site.yml")
    assert wrong not in r.stdout
    assert on_host("lab1", "systemctl cat vllm.service") == unit, "a failed download changed the engine's unit"
    assert on_host("lab1", f"cd {hub_folder(HUB_A)} && ls .vllm-fleet-download.json config.json 2>/dev/null; true") \
        == "", "a failed download left a model behind"
    since = time.time()
    r = play("playbooks/engine.yml", extravars=dict(RESERVE_OFF, vllm_server_backend="mp", **hub_vars(HUB_A)))
    assert r.rc != 0, "the flags check accepted --no-scheduler-reserve-full-isl"
    assert "scheduler_reserve_full_isl: expected true, running false" in r.stdout
    head, worker = on_host("lab1", "ps -eo args"), on_host("lab2", "ps -eo args")
    # Both hosts downloaded it with the inventory's token, into the revision's own folder,
    # which the engine now runs.
    assert f"vllm serve {hub_folder(HUB_A)} " in head, head
    for host in ("lab1", "lab2"):
        assert on_host(host, f"cmp {hub_folder(HUB_A)}/model.safetensors /srv/models/tiny/model.safetensors &&"
                             f" grep -q '\"commit\": \"{HUB_A}\"' {hub_folder(HUB_A)}/.vllm-fleet-download.json"
                             " && echo ok").strip() == "ok", host
    files = on_host("lab1", "ls /srv/models/tiny").split()
    gets = [q for q in hub_requests(since) if q["method"] == "GET" and "/resolve/" in q["path"]]
    assert sorted(q["path"].rsplit("/", 1)[1] for q in gets) == sorted(files * 2), gets
    assert all(q["authorization"] and q["status"] == 200 for q in gets), gets
    assert re.search(r"--distributed-executor-backend[= ]mp\b", head), head
    assert re.search(r"--tensor-parallel-size[= ]2\b", head), head
    assert "--headless" in worker
    assert "raylet" not in head + worker
    assert "--max-num-seqs 4" not in head, "the down worker's refused run left its flag"
    assert "10.201.0.12" in head_peers(), "the worker is admitted at its link address"
    assert "29555" in on_host("lab1", "nft list table inet vllm_fleet_ray"), \
        "the master port (torch's store on every address) is not reset for the service network"
    client = openai.OpenAI(base_url=BASE_URL + "/v1", api_key=engine_key(), timeout=60, max_retries=0)
    assert client.completions.create(model="tiny", prompt="ping", max_tokens=1).usage.completion_tokens == 1
    # The lab's keys again after the keyless two engines (test_restart.py): the placeholder is refused.
    keyless = openai.OpenAI(base_url=BASE_URL + "/v1", api_key="EMPTY", timeout=60, max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        keyless.completions.create(model="tiny", prompt="ping", max_tokens=1)

    before = scrape()
    with Sessions(3) as s:
        s.wait_for(lambda m: m.get("num_preemptions_total", 0) > before.get("num_preemptions_total", 0),
                   "a preemption")
        v = diagnose(play, tmp_path)
    assert s.errors == [], s.errors
    assert v["verdict"] == "preempting", v
    assert "--no-scheduler-reserve-full-isl" in v["advice"][0]
