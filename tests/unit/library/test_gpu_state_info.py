"""Tests for library/gpu_state_info.py, run in-process through conftest's run_module: a fake
``nvidia-smi`` first on PATH prints real captures (tests/fixtures/gpu-field/nvidia-smi/, each with
its public source), fails, or is missing."""
from __future__ import annotations

import os
from pathlib import Path

import gpu_state_info
import pytest

CAPTURES = Path(__file__).resolve().parents[2] / "fixtures" / "gpu-field" / "nvidia-smi"
# An RTX with SW Power Cap Active; GB10's shape with every reason Not Active (its counters and T.Limit).
POWER_CAP = "02_rtx_q_power_temp_perf_sw_power_cap_ACTIVE_ollama6163.txt"
GB10_CALM = "01_gb10_q_perf_temp_thermal_counter_ollama13552.txt"


@pytest.fixture
def bin_dir(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "bin"
    path.mkdir()
    # No nvidia-smi on the rest of PATH either: the fake is the only one.
    monkeypatch.setenv("PATH", f"{path}{os.pathsep}/usr/bin{os.pathsep}/bin")
    return path


def fake_smi(bin_dir: Path, body: str) -> Path:
    exe = bin_dir / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(0o755)
    return exe


def test_an_active_power_cap_is_named(bin_dir, run_module):
    fake_smi(bin_dir, f'echo "$*" > "{bin_dir}/args"\ncat "{CAPTURES / POWER_CAP}"\n')
    r = run_module(gpu_state_info, {})
    assert (r["present"], r["changed"], r["reason"]) == (True, False, "")
    assert r["throttled"] == "GPU 00000000:0B:00.0: SW Power Cap active at 77 C (slowdown at 97 C)"
    assert r["gpus"][0]["active"] == ["SW Power Cap"]
    assert (bin_dir / "args").read_text().split() == ["-q", "-d", "PERFORMANCE,TEMPERATURE"]


def test_gb10_with_no_reason_active_is_not_throttled(bin_dir, run_module):
    fake_smi(bin_dir, f'cat "{CAPTURES / GB10_CALM}"\n')
    r = run_module(gpu_state_info, {})
    assert (r["present"], r["throttled"]) == (True, None)
    assert r["gpus"][0]["t_limit_margin_c"] == 13


def test_no_nvidia_smi_is_no_nvidia_host(bin_dir, run_module):
    r = run_module(gpu_state_info, {})
    assert (r["present"], r["throttled"], r["gpus"]) == (False, None, [])
    assert r["reason"] == "no nvidia-smi here: not an NVIDIA host"
    assert "failed" not in r


def test_a_failing_nvidia_smi_is_said_not_failed(bin_dir, run_module):
    fake_smi(bin_dir, 'echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver." >&2\n'
                      "exit 9\n")
    r = run_module(gpu_state_info, {})
    assert (r["present"], r["throttled"]) == (True, None)
    assert "exited 9: NVIDIA-SMI has failed because it couldn't communicate" in r["reason"]
    assert "failed" not in r


def test_output_with_no_gpu_is_said(bin_dir, run_module):
    fake_smi(bin_dir, 'echo "No devices were found"\n')
    r = run_module(gpu_state_info, {})
    assert r["throttled"] is None and "no GPU in the output" in r["reason"]


def test_a_hung_nvidia_smi_is_cut_at_the_timeout(bin_dir, run_module):
    fake_smi(bin_dir, "exec sleep 30\n")
    r = run_module(gpu_state_info, {"timeout": 1})
    assert r["throttled"] is None and "exited 124" in r["reason"]


def test_a_path_is_run_as_given(tmp_path, run_module):
    exe = fake_smi(tmp_path, f'cat "{CAPTURES / POWER_CAP}"\n')
    r = run_module(gpu_state_info, {"nvidia_smi": str(exe)})
    assert r["throttled"].startswith("GPU 00000000:0B:00.0: SW Power Cap active")


def test_a_timeout_under_a_second_is_refused_whatever_the_host(bin_dir, run_module):
    r = run_module(gpu_state_info, {"timeout": 0})
    assert r["failed"] and r["msg"] == "timeout must be 1 second or more, got 0"
