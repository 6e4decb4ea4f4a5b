"""Each role's molecule scenario (roles/<role>/molecule/default/, shared
settings in .config/molecule/config.yml), run as a developer would:
``molecule test`` from the role's directory.

make test runs these after the site and serving-mode tests, on the lab they
left up: each scenario's create finds the hosts answering and its destroy
leaves them up. Run alone (``cd roles/<role> && molecule test``) a scenario
brings the lab up and takes it down itself.

The order is the order the roles build on each other, so a scenario's
prepare step finds its prerequisites in place and only checks them.

The roles site.yml applies run only create, verify and destroy here: on these
hosts, with this inventory, test_site.py's first converge was their converge
and its second run (nothing changed) their idempotence step; so does
serving_cutover, whose converge test_serving_modes.py ran under load. The
others run molecule's whole sequence.
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
    "vllm_verify",
    "vllm_diagnose",
    "vllm_restart",
    "restart_schedule",
    "serving_endpoint",
    "fleet_report",
    "serving_cutover",
    "gate_service",
]


# Converged here already, exactly as their converge.yml applies them: by site.yml's
# engine.yml, and serving_cutover by test_serving_modes.py's cutovers under load
# (its prepare and converge are a gate cutover and a direct one, idempotent), whose
# end state (direct mode, the gate archived) its verify reads; so it runs before
# gate_service's scenario starts the gate. The serving_endpoint and fleet_report
# scenarios converge more than site.yml does (an operator's consumer file, a report
# of their own, which their verify reads).
SITE_ROLES = {"gpu_preflight", "vllm_install", "ray_cluster", "vllm_server", "vllm_verify", "serving_cutover"}
SITE_ROLE_SEQUENCE = "[create, verify, destroy]"


def molecule_test(role: str, timeout: int = 1800) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        **({"VLLM_FLEET_MOLECULE_SEQUENCE": SITE_ROLE_SEQUENCE} if role in SITE_ROLES else {}),
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


@pytest.mark.parametrize("role", ROLES_IN_ORDER)
def test_role_scenario(role):
    r = molecule_test(role)
    out = r.stdout + r.stderr
    tail = "\n".join(out.splitlines()[-80:])
    assert r.returncode == 0, f"molecule test failed for {role}:\n{tail}"
    # Every step ran, none was skipped for a missing playbook, and (for the
    # roles site.yml does not apply) the idempotence step passed.
    recap = re.search(r"^default\s*: actions=(\d+)\s+successful=(\d+)\s+disabled=(\d+)\s+skipped=(\d+)"
                      r"\s+missing=(\d+)\s+failed=(\d+)", out, re.M)
    assert recap, f"no scenario recap in molecule's output:\n{tail}"
    actions, successful, _disabled, skipped, missing, failed = map(int, recap.groups())
    assert (failed, missing, skipped) == (0, 0, 0) and successful == actions, recap.group(0)
    if role not in SITE_ROLES:
        assert re.search(r"default (?:>|➜) idempotence: Executed: Successful", out), tail
    assert re.search(r"default (?:>|➜) verify: Executed: Successful", out), tail
