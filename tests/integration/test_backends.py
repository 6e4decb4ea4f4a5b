"""site.yml with a worker down, then vLLM's own multi-node backend (mp), on the lab.

Runs after test_restart.py, which leaves the lab as two one-host engines, and
before test_diagnose.py, whose engine play takes the lab back to Ray with the
field's pool. So one engine play reshapes the lab from two engines into the
mp backend and the next one puts Ray back, and no boot only resets state
(docs/lab.md: the suite's cost).
"""
from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.lab

from labtools import SITE_REPORT, invocation, lab_args, lab_sh, on_host, stop_engines


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


def test_the_mp_backend_serves_tp2_across_two_hosts_with_the_inventorys_flags(play):
    """The alternative backend: vLLM's own multi-node mode (--nnodes, a --headless worker), no
    Ray, from the two one-host engines (stopped first: moving hosts between engines,
    docs/provisioning.md), with the inventory's flags. test_diagnose.py's engine play takes it
    back to Ray, the production path.

    The two engines left the head's Ray firewall admitting only itself; the mp ranks pair over
    the same ephemeral ports, so the run must render it for both hosts before the worker
    connects (it once did not, and the worker's Gloo connections were reset)."""
    assert "10.200.0.12" not in head_peers(), "the two one-host engines should have left lab1 admitting only itself"
    stop_engines()
    r = play("site.yml", extravars={"vllm_server_backend": "mp"})
    assert r.rc == 0
    report = json.loads(SITE_REPORT.read_text())
    (engine,) = report["engines"]
    assert engine["flags"]["distributed_executor_backend"] == "mp"
    assert int(engine["flags"]["tensor_parallel_size"]) == 2
    assert report["sample_completion"]["text"]
    assert "--headless" in on_host("lab2", "ps -eo args")
    assert "raylet" not in on_host("lab1", "ps -eo args") + on_host("lab2", "ps -eo args")
    assert "--max-num-seqs 4" not in on_host("lab1", "ps -eo args")
    assert "10.200.0.12" in head_peers()
