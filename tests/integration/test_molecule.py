"""Each role's molecule scenario (roles/<role>/molecule/default/, shared
settings in .config/molecule/config.yml), run as a developer would:
``molecule test`` from the role's directory.

make test runs these after the site and serving-mode tests, on the lab they
left up. Run by hand (``cd roles/<role> && molecule test``) a scenario runs
whole: its create brings the lab up if it is not, and its destroy takes it
down only if create brought it up.

The order is the order the roles build on each other, so a scenario's
prepare step finds its prerequisites in place and only checks them.

A scenario run whole here skips the first destroy of its sequence: the lab
is up, and it would find nothing of its own to take down. Its create and
its last destroy still run (tests/molecule/: they find the lab up and leave
it up).

A scenario runs only its verify step when another file of the same pytest
run applies its role the same way, on these hosts with this inventory, and
runs it again with changed=0: those runs are its converge and idempotence
steps (CONVERGED_BY). Each such verify needs no converge
step: it reads what those files left, or makes what it reads itself
(vllm_restart plans; fleet_report, restart_schedule and vllm_diagnose run
converge.yml's plays first). gate_service's verify needs the gate started,
which test_serving_modes.py's cutover leaves only until its cutover back:
that file runs the scenario there, and its test here checks that run. Run
without those files (make molecule), every scenario runs whole,
gate_service's here.
"""
from __future__ import annotations

import os
import re
import subprocess

import pytest
from labtools import REPO

ROLES_IN_ORDER = [
    "gpu_preflight",
    "vllm_install",
    "ray_cluster",
    "vllm_server",
    "engine_recovery",
    "vllm_verify",
    "vllm_diagnose",
    "vllm_restart",
    "restart_schedule",
    "serving_endpoint",
    "fleet_report",
    "fleet_steps",
    "fleet_watch",
    "fleet_heal",
    "serving_cutover",
    "gate_service",
]

# The file whose runs are a role's converge and idempotence steps. serving_endpoint has none:
# its scenario converges an operator's consumer file, which no playbook run writes.
CONVERGED_BY = {
    # site.yml's first converge (test_first_converge_serves_tp2_over_ray_across_two_hosts) and
    # its second run, whose only changes are the two that move a real venv folder into its
    # install (test_second_run_moves_a_real_venv_folder_into_its_install_and_otherwise_changes_nothing),
    # then --check --diff with changed=0; fleet_report as site.yml ends
    # (playbooks/report.yml, after vllm_verify on the engines).
    "gpu_preflight": "test_site.py",
    "vllm_install": "test_site.py",
    "ray_cluster": "test_site.py",
    "vllm_server": "test_site.py",
    "vllm_verify": "test_site.py",
    "engine_recovery": "test_site.py",
    "fleet_report": "test_site.py",
    # Its canary (vllm_verify's) and its report (fleet_report's) in every site.yml run.
    "fleet_steps": "test_site.py",
    # site.yml imports playbooks/watch.yml: each run converges it, the second with changed=0.
    "fleet_watch": "test_site.py",
    # The same import's last play, on the controller (the lab sets vllm_fleet_heal_url).
    "fleet_heal": "test_site.py",
    # test_both_cutovers_under_load_have_zero_errors_and_zero_fallbacks: the gate cutover (its
    # gate_up.yml starts gate_service on the gate host), the direct cutover, each rerun with
    # changed=0. serving_cutover's verify reads the end state they leave (direct mode, the gate
    # archived), so it runs before gate_service's scenario would start the gate.
    "serving_cutover": "test_serving_modes.py",
    "gate_service": "test_serving_modes.py",
    # test_slow_prefill_alerts_and_the_loop_restarts_and_cures_it: its last run plans
    # when-degraded on the cured engine, skips it as healthy, changes nothing.
    "vllm_restart": "test_heal.py",
    # test_the_cron_entry_runs_the_restart_through_ansible_runner_and_an_overlap_exits_75:
    # schedule-restart.yml, then again with changed=0.
    "restart_schedule": "test_restart.py",
    # Every diagnose.yml run there (diagnose()): rc 0, changed=0.
    "vllm_diagnose": "test_diagnose.py",
}
# Verified by that file itself, while the state the verify reads holds; it leaves the
# scenario's run here (RAN_THERE), and this file's test for the role checks it.
VERIFIED_THERE = {"gate_service"}
RAN_THERE: dict[str, subprocess.CompletedProcess] = {}
SHORT_SEQUENCE = "[verify]"


def lab_up_sequence(role: str) -> str:
    """A whole scenario on the lab that is up: its sequence without the first destroy."""
    prepare = ["prepare"] if (REPO / "roles" / role / "molecule" / "default" / "prepare.yml").is_file() else []
    return "[" + ", ".join(["syntax", "create", *prepare, "converge", "idempotence", "verify", "destroy"]) + "]"


def molecule_test(role: str, short: bool, timeout: int = 1800) -> subprocess.CompletedProcess:
    """``molecule test`` in roles/<role>/; with ``short``, its verify step only."""
    env = {
        **os.environ,
        "VLLM_FLEET_MOLECULE_SEQUENCE": SHORT_SEQUENCE if short else lab_up_sequence(role),
        # molecule runs ansible-config and ansible-playbook from PATH.
        "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}",
        "NO_COLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "PY_COLORS": "0",
    }
    return subprocess.run(
        [str(REPO / ".venv" / "bin" / "molecule"), "test"],
        cwd=REPO / "roles" / role, env=env, capture_output=True, text=True, timeout=timeout,
    )


def assert_scenario_passed(role: str, r: subprocess.CompletedProcess, short: bool) -> None:
    out = r.stdout + r.stderr
    tail = "\n".join(out.splitlines()[-80:])
    assert r.returncode == 0, f"molecule test failed for {role}:\n{tail}"
    # Every step ran, none was skipped for a missing playbook, and (run whole)
    # the idempotence step passed.
    recap = re.search(r"^default\s*: actions=(\d+)\s+successful=(\d+)\s+disabled=(\d+)\s+skipped=(\d+)"
                      r"\s+missing=(\d+)\s+failed=(\d+)", out, re.M)
    assert recap, f"no scenario recap in molecule's output:\n{tail}"
    actions, successful, _disabled, skipped, missing, failed = map(int, recap.groups())
    assert (failed, missing, skipped) == (0, 0, 0) and successful == actions, recap.group(0)
    if short:
        assert not re.search(r"default (?:>|➜) converge:", out), f"{role}: the short sequence ran converge:\n{tail}"
    else:
        assert re.search(r"default (?:>|➜) idempotence: Executed: Successful", out), tail
    assert re.search(r"default (?:>|➜) verify: Executed: Successful", out), tail


@pytest.mark.parametrize("role", ROLES_IN_ORDER)
def test_role_scenario(role, request):
    in_this_run = {item.path.name for item in request.session.items}
    converged_by = CONVERGED_BY.get(role)
    short = converged_by in in_this_run
    if role in VERIFIED_THERE and short:
        # Nothing skipped: the run that file made is checked here too (a failure before it
        # ran fails this test).
        assert role in RAN_THERE, f"{converged_by} did not run {role}'s scenario"
        assert_scenario_passed(role, RAN_THERE[role], short)
        return
    assert_scenario_passed(role, molecule_test(role, short), short)
