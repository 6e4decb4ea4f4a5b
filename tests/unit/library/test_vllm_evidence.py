"""Tests for library/vllm_evidence.py: a real process in a (fake) unit's cgroup
with a key on its command line, stand-ins for systemctl, py-spy and
journalctl first on PATH: the bundle's files, all masked, mode 0600; what is
missing is said, never fatal; check mode writes nothing. The masking itself is
tested in tests/unit/module_utils/watch/test_evidence.py."""
from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import vllm_evidence as module

KEY = "lab-engine-key-0d9c41f7-not-a-secret"


def make_exe(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A python process of the unit, its cgroup, and the stand-in commands."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "--api-key", KEY])
    group = tmp_path / "cgroup" / "system.slice" / "vllm.service"
    (group / "child").mkdir(parents=True)
    (group / "cgroup.procs").write_text("")
    (group / "child" / "cgroup.procs").write_text(f"{proc.pid}\n")
    monkeypatch.setattr(module, "CGROUP_ROOT", str(tmp_path / "cgroup"))
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    make_exe(bin_ / "systemctl", '#!/bin/sh\ncase "$*" in *vllm.service*) echo /system.slice/vllm.service ;; '
                                 '*) echo "" ;; esac\n')
    make_exe(bin_ / "journalctl", f"#!/bin/sh\necho 'vllm serve /opt/model --api-key {KEY}'\necho \"$@\"\n")
    py_spy = make_exe(bin_ / "py-spy", f"#!/bin/sh\necho \"Process $3: python\"\necho 'Thread 1 (idle): key={KEY}'\n")
    monkeypatch.setenv("PATH", f"{bin_}:/usr/bin:/bin")
    yield {"proc": proc, "py_spy": str(py_spy), "dest": tmp_path / "evidence"}
    proc.kill()
    proc.wait()


def args(host, **extra) -> dict:
    return dict({"engine": "engine_lab", "units": ["vllm.service", "ray.service"], "dest_dir": str(host["dest"]),
                 "secrets": [KEY], "py_spy": host["py_spy"]}, **extra)


def bundle_files(path: str) -> dict:
    with tarfile.open(path) as tar:
        return {m.name.split("/", 1)[1]: (tar.extractfile(m).read().decode(), m.mode) for m in tar.getmembers()}


def test_the_bundle_keeps_stacks_journal_memory_and_pressure_masked(run_module, host):
    result = run_module(module, args(host))
    assert result["changed"] and result["bundle"].endswith(".tar.gz"), result
    assert Path(result["bundle"]).stat().st_mode & 0o777 == 0o600
    pid = host["proc"].pid
    assert [p["pid"] for p in result["processes"]] == [pid]
    files = bundle_files(result["bundle"])
    assert set(files) >= {f"stacks-{pid}.txt", "journal.txt", "processes.txt", "meminfo.txt", "pressure.txt",
                          "missing.txt"}
    assert f"Process {pid}" in files[f"stacks-{pid}.txt"][0] and "MemTotal" in files["meminfo.txt"][0]
    assert all(KEY not in text for text, _mode in files.values()), "a secret is in the bundle"
    journal = files["journal.txt"][0]
    assert "--api-key ********" in journal and "-u vllm.service -u ray.service" in journal
    assert all(mode == 0o600 for _text, mode in files.values())
    # Not there, and said: ray.service does not run here, and there is no GPU.
    assert any(m.startswith("ray.service: systemd knows no control group") for m in result["missing"])
    assert "gpu: no nvidia-smi on this host" in result["missing"]


def test_without_py_spy_the_rest_is_kept_and_the_stacks_are_missing(run_module, host):
    result = run_module(module, args(host, py_spy="/nonexistent/py-spy"))
    assert not result.get("failed") and "journal.txt" in result["files"]
    assert not [f for f in result["files"] if f.startswith("stacks-")]
    said = "stacks: /nonexistent/py-spy is not there (roles/vllm_install puts py-spy in vllm_fleet_tools_venv)"
    assert said in result["missing"]


def test_check_mode_writes_nothing(run_module, host):
    result = run_module(module, args(host), check_mode=True)
    assert result["changed"] and not host["dest"].exists()


def test_a_bad_engine_name_is_refused(run_module, host):
    result = run_module(module, args(host, engine="../x"))
    assert result["failed"] and "no engine name" in result["msg"] and not host["dest"].exists()


def test_a_hybrid_host_s_named_systemd_hierarchy_holds_the_unit_s_processes(run_module, host, tmp_path):
    """cgroup v1 (the lab's hosts, older container hosts): the unit's group is under systemd's own
    hierarchy, not at the root."""
    root = tmp_path / "cgroup"
    (root / "systemd").mkdir()
    (root / "system.slice").rename(root / "systemd" / "system.slice")
    result = run_module(module, args(host))
    assert f"stacks-{host['proc'].pid}.txt" in result["files"], result


def test_a_unit_whose_group_holds_no_process_is_said_missing(run_module, host, tmp_path):
    group = tmp_path / "cgroup" / "system.slice" / "vllm.service"
    (group / "child" / "cgroup.procs").write_text("")
    result = run_module(module, args(host))
    assert "vllm.service: no process found in its control group (stopped?)" in result["missing"], result


def test_a_process_that_cannot_be_suspended_is_read_without_suspending(run_module, host, tmp_path):
    """A wedged engine core is SIGSTOPped: py-spy cannot suspend it, so it is read again with
    --nonblocking, and that stack is kept."""
    make_exe(Path(host["py_spy"]), '#!/bin/sh\ncase "$*" in *--nonblocking*) echo "Thread 1 (idle): step";; '
                                   '*) echo "Error: Failed to suspend process"; exit 1;; esac\n')
    result = run_module(module, args(host))
    pid = host["proc"].pid
    text, _mode = bundle_files(result["bundle"])[f"stacks-{pid}.txt"]
    assert "Failed to suspend process" in text and "again with --nonblocking" in text and "step" in text
    assert not [m for m in result["missing"] if m.startswith("stacks of")], result["missing"]
