"""From a clone, after `make venv` alone: the venv runs the clone's gate
(installed editable, no PYTHONPATH), and the wheel the gate_service role
builds on the controller still builds, offline and without build
isolation."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile

from gate_helpers import GATE_DIR

VERSION = re.search(r'(?m)^version = "([^"]+)"', (GATE_DIR / "pyproject.toml").read_text()).group(1)


def run(*args: str, cwd) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_the_venv_runs_the_clones_gate_without_pythonpath(tmp_path):
    r = run("-m", "vllm_fleet_gate", "--help", cwd=tmp_path)
    assert r.returncode == 0, f"not installed in the venv? run `make venv`\n{r.stderr}"
    assert r.stdout.startswith("usage: vllm-fleet-gate")
    r = run("-c", "import vllm_fleet_gate as g; print(g.__file__); print(g.__version__)", cwd=tmp_path)
    assert r.stdout.split() == [str(GATE_DIR / "vllm_fleet_gate" / "__init__.py"), VERSION]


def test_the_roles_wheel_still_builds_offline(tmp_path):
    """What roles/gate_service/tasks/install.yml runs, on a copy of gate/
    (the build leaves build/ and *.egg-info beside the source)."""
    src = tmp_path / "gate"
    shutil.copytree(GATE_DIR, src, ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__"))
    r = run("-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "--quiet",
            "--wheel-dir", str(tmp_path / "dist"), str(src), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    wheel = tmp_path / "dist" / f"vllm_fleet_gate-{VERSION}-py3-none-any.whl"
    names = zipfile.ZipFile(wheel).namelist()
    assert "vllm_fleet_gate/app.py" in names and "vllm_fleet_gate/admission.py" in names
