"""Tests for library/gpu_preflight_info.py, run in-process through conftest's run_module.

Fake ``nvidia-smi``, ``ip`` and ``ss`` scripts first on PATH print real
captures (tests/fixtures/nvidia-smi/, tests/fixtures/host-probes/); the
module's /proc and /sys paths point at files in tmp_path.
"""
from __future__ import annotations

import os
from pathlib import Path

import gpu_preflight_info
import pytest

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures"
SMI = FIXTURES / "nvidia-smi"
HOST = FIXTURES / "host-probes"

GB10_TABLE = "06_gb10_table_580_126_arctictraining345.txt"
GB10_CSV = "01_gb10_csv_memory_na_unsloth10283.txt"
H100_TABLE = "19_h100_table_535_gvisor10413.txt"
B200_TABLE = "24_b200_kmd_umd_header_sglang27487.txt"
# What an old driver prints for a field it lacks (the exact message nvidia-smi
# gives, e.g. for cuda_version); the module then reads the table alone.
INVALID_FIELD = 'Field "compute_cap" is not a valid field to query.'


def smi_output(name: str) -> str:
    lines = (SMI / name).read_text().splitlines()
    return "\n".join(line for line in lines if not line.startswith("$ ")) + "\n"


def make_exe(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


class Host:
    """A fake host: bin/ (first on PATH), /proc/meminfo, /sys/class/net, /proc/PID/cgroup."""

    def __init__(self, root: Path, monkeypatch):
        self.root = root
        self.bin = root / "bin"
        self.bin.mkdir()
        monkeypatch.setenv("PATH", f"{self.bin}{os.pathsep}{os.environ['PATH']}")
        self.meminfo = root / "meminfo"
        self.meminfo.write_text((HOST / "meminfo_gb10_dgx_spark_notes.txt").read_text())
        monkeypatch.setattr(gpu_preflight_info, "MEMINFO", str(self.meminfo))
        self.net = root / "net"
        for name in ("eth0", "lo"):
            (self.net / name).mkdir(parents=True)
        monkeypatch.setattr(gpu_preflight_info, "SYS_CLASS_NET", str(self.net))
        self.proc = root / "proc"
        (self.proc / "26192").mkdir(parents=True)
        (self.proc / "26192" / "cgroup").write_text((HOST / "cgroup_dev_container.txt").read_text())
        monkeypatch.setattr(gpu_preflight_info, "PROC", str(self.proc))
        self.calls = root / "calls.log"
        self.ip(HOST / "ip_o4_addr_dev_container.txt", HOST / "ip_o_link_dev_container.txt")
        self.print("ss", HOST / "ss_Htlnp_dev_container.txt")

    def print(self, name: str, fixture: Path, rc: int = 0):
        out = self.root / f"{name}.out"
        out.write_text(fixture.read_text())
        make_exe(self.bin / name, f'#!/bin/sh\necho "{name} $*" >> "{self.calls}"\ncat "{out}"\nexit {rc}\n')

    def ip(self, addr: Path, link: Path, link_rc: int = 0):
        """``ip -o -4 addr show`` prints ``addr``, ``ip -o link show`` prints ``link``."""
        (self.root / "addr.out").write_text(addr.read_text())
        (self.root / "link.out").write_text(link.read_text())
        make_exe(self.bin / "ip", f'#!/bin/sh\necho "ip $*" >> "{self.calls}"\n'
                                  f'case "$*" in "-o link show")'
                                  f' cat "{self.root / "link.out"}"; exit {link_rc};; esac\n'
                                  f'cat "{self.root / "addr.out"}"\n')

    def nvidia_smi(self, table: str, csv: str | None = None, rc: int = 0):
        (self.root / "table.out").write_text(smi_output(table))
        if csv:
            (self.root / "csv.out").write_text(smi_output(csv))
            query = f'cat "{self.root / "csv.out"}"; exit 0'
        else:
            query = f"echo '{INVALID_FIELD}'; exit 2"
        make_exe(
            self.bin / "nvidia-smi",
            f'#!/bin/sh\necho "nvidia-smi $*" >> "{self.calls}"\n'
            f'case "$1" in --query-gpu=*) {query};; esac\n'
            f'cat "{self.root / "table.out"}"\nexit {rc}\n',
        )

    def commands(self) -> list:
        return self.calls.read_text().splitlines() if self.calls.exists() else []


@pytest.fixture
def fake(tmp_path, monkeypatch):
    return Host(tmp_path, monkeypatch)


FIELD = dict(
    min_gpus=1,
    min_gpu_memory_gib=100,
    min_cuda_version="12.8",
    interface="eth0",
    address="192.0.2.2",
    peer_addresses=["192.0.2.12"],
    ports=[6379, 8000, 29555],
    owner_units=["ray.service", "vllm.service"],
)


def warnings(result) -> list:
    """Warning texts; ansible-core 2.19 returns each as {'event': {'msg': ...}}."""
    return [w if isinstance(w, str) else w["event"]["msg"] for w in result.get("warnings", [])]


def names(result) -> list:
    return [c["check"] for c in result["checks"]]


# ---- GPU --------------------------------------------------------------------

def test_gb10_passes_on_host_meminfo(fake, run_module):
    fake.nvidia_smi(GB10_TABLE, GB10_CSV)
    result = run_module(gpu_preflight_info, dict(FIELD, ports=[29555]))
    assert result.get("failed") is not True, result.get("msg")
    assert result["ok"] is True and result["changed"] is False
    assert names(result) == ["gpu_driver", "gpu_count", "gpu_memory", "cuda_version", "engine_interface",
                             "engine_link", "engine_subnet", "ports_free"]
    assert result["memory_source"] == "host meminfo"
    assert result["unified_memory"] is True
    assert (result["driver_version"], result["cuda_version"], result["gpu_count"]) == ("580.126.09", "13.0", 1)
    gpu = result["gpus"][0]
    assert gpu["name"] == "NVIDIA GB10" and gpu["memory_total_mib"] is None and gpu["unified_memory"] is True
    memory = result["checks"][2]
    assert "host MemTotal from /proc/meminfo 121.7 GiB" in memory["detail"]
    assert result["report"][0] == ("PASS gpu_driver: driver 580.126.09, CUDA 13.0;"
                                   " nvidia-smi sees 1 GPU(s): 0 NVIDIA GB10")
    assert result["failed_checks"] == [] and result["skipped_checks"] == []
    assert result["message"] == "all 8 preflight checks passed"
    assert fake.commands()[:2] == [
        "nvidia-smi ",
        "nvidia-smi --query-gpu=index,name,uuid,memory.total,memory.used,driver_version,compute_cap"
        " --format=csv,nounits",
    ]


def test_every_failed_check_is_in_the_message(fake, run_module):
    fake.nvidia_smi(H100_TABLE)  # the CSV query fails: the table alone
    result = run_module(gpu_preflight_info, dict(FIELD, address="10.0.0.11", peer_addresses=["10.0.0.12"]))
    assert result["failed"] is True
    assert result["failed_checks"] == ["gpu_memory", "cuda_version", "engine_interface", "engine_subnet", "ports_free"]
    lines = result["msg"].splitlines()
    assert lines[0] == "5 of 8 preflight checks failed:"
    assert [ln.split(":")[0] for ln in lines[1:] if ln.startswith("- ")] == [
        "- gpu_memory", "- cuda_version", "- engine_interface", "- engine_subnet", "- ports_free"]
    assert sum(ln.startswith("  fix: ") for ln in lines) == 5
    assert "- cuda_version: the driver supports CUDA 12.2, 12.8 required (driver 535.129.03)" in lines
    assert "- ports_free: 6379 held by python3 (pid 26192); 8000 held by python3 (pid 26192); 29555 free" in lines
    assert result["memory_source"] == "gpu" and result["gpus"][0]["memory_total_mib"] == 81559
    assert any("CSV query failed" in w for w in warnings(result))


@pytest.mark.parametrize(
    "fixture,kind",
    [("35_fail_no_driver_shine_cluster50.txt", "driver_not_loaded"),
     ("36_fail_mismatch_shine_cluster30.txt", "driver_library_mismatch")],
)
def test_driver_failure_stops_the_gpu_checks(fake, run_module, fixture, kind):
    fake.nvidia_smi(fixture, rc=9)
    result = run_module(gpu_preflight_info, {"min_cuda_version": "12.8"})
    assert result["failed"] is True
    assert names(result) == ["gpu_driver"]
    assert result["checks"][0]["detail"].startswith(f"nvidia-smi failed ({kind}): ")
    assert result["msg"].startswith("1 of 1 preflight checks failed:\n- gpu_driver: nvidia-smi failed")
    assert result["memory_source"] is None and result["gpus"] == []


def test_unclassified_nonzero_exit(fake, run_module):
    fake.nvidia_smi(B200_TABLE, rc=3)
    result = run_module(gpu_preflight_info, {})
    assert result["failed"] is True
    assert result["checks"][0]["detail"].startswith("nvidia-smi failed (unreadable_output): nvidia-smi exited 3: ")


def test_nvidia_smi_missing(fake, run_module, tmp_path):
    result = run_module(gpu_preflight_info, {"nvidia_smi": str(tmp_path / "nope" / "nvidia-smi")})
    assert result["failed"] is True
    check = result["checks"][0]
    assert check["detail"].startswith(
        f"nvidia-smi failed (not_installed): {tmp_path / 'nope' / 'nvidia-smi'} not found")
    # The module's option, not the role's variable.
    assert check["hint"].endswith("or set nvidia_smi to its path.")


def test_nvidia_smi_by_path(fake, run_module):
    fake.nvidia_smi(B200_TABLE, rc=0)
    result = run_module(gpu_preflight_info, {"nvidia_smi": str(fake.bin / "nvidia-smi"), "min_gpus": 2,
                                             "min_gpu_memory_gib": 100, "min_cuda_version": "12.8"})
    assert result["ok"] is True, result.get("msg")
    assert result["memory_source"] == "gpu" and result["gpu_count"] == 2
    assert result["cuda_version"] == "13.3" and result["driver_version"] == "610.43.02"


def test_cuda_without_minimum_is_reported_only(fake, run_module):
    fake.nvidia_smi(H100_TABLE)
    result = run_module(gpu_preflight_info, {})
    assert result["ok"] is True
    assert result["checks"][3] == {"check": "cuda_version", "ok": True, "hint": "",
                                   "detail": "the driver supports CUDA 12.2, no minimum set"}


# ---- accelerator: cpu --------------------------------------------------------

def test_cpu_skips_only_the_gpu_checks(fake, run_module, tmp_path):
    result = run_module(gpu_preflight_info, dict(FIELD, accelerator="cpu", ports=[29555],
                                                 nvidia_smi=str(tmp_path / "absent"),
                                                 disk_path=str(tmp_path), min_disk_gib=0.001))
    assert result["ok"] is True, result.get("msg")
    assert names(result) == ["engine_interface", "engine_link", "engine_subnet", "ports_free", "disk_free"]
    assert result["link_mtu"] == 1400
    assert result["skipped_checks"] == ["gpu_driver", "gpu_count", "gpu_memory", "cuda_version"]
    assert result["gpus"] == [] and result["memory_source"] is None and result["driver_version"] is None
    assert not any(c.startswith("nvidia-smi") for c in fake.commands())


# ---- network and ports ---------------------------------------------------------

def test_wrong_interface_names_the_right_one(fake, run_module):
    result = run_module(gpu_preflight_info, dict(accelerator="cpu", interface="enp1s0f1np1", address="192.0.2.2"))
    assert result["failed"] is True
    check = result["checks"][0]
    assert check["detail"] == "interface enp1s0f1np1 does not exist; this host has eth0, lo"
    assert "is on eth0: set interface, and the engine's NCCL_SOCKET_IFNAME" in check["hint"]
    assert "ip -o -4 addr show" in fake.commands()


def test_two_networks_check_the_service_address_and_the_links_state(fake, run_module):
    """A Spark pair: the engine on the link (eth1), the API on the LAN (eth0)."""
    fake.ip(HOST / "ip_o4_addr_dev_container.txt", HOST / "ip_o_link_dev_container.txt")
    args = dict(accelerator="cpu", interface="eth0", address="192.0.2.2", service_address="192.0.2.2")
    result = run_module(gpu_preflight_info, args)
    assert names(result) == ["engine_interface", "engine_link"]  # one network: no service_address check
    assert "ip -o link show" in fake.commands()
    away = run_module(gpu_preflight_info, dict(args, service_address="198.51.100.7", on_failure="warn"))
    assert away["ok"] is False and away["failed_checks"] == ["service_address"]
    assert "the service address 198.51.100.7 is on no interface" in away["message"]


def test_a_link_without_carrier_fails_engine_link(fake, run_module):
    fake.ip(HOST / "ip_o4_addr_dev_container.txt", HOST / "ip_o_link_veth_peer_down.txt")
    (fake.net / "eth1").mkdir()
    result = run_module(gpu_preflight_info, dict(accelerator="cpu", interface="eth1", on_failure="warn"))
    assert "engine_link" in result["failed_checks"]
    assert "eth1 is down (state DOWN)" in result["message"] and result["link_mtu"] == 9000


def test_a_failed_ip_link_fails_engine_link(fake, run_module):
    fake.ip(HOST / "ip_o4_addr_dev_container.txt", HOST / "ip_o_link_dev_container.txt", link_rc=1)
    result = run_module(gpu_preflight_info, dict(accelerator="cpu", interface="eth0"))
    assert result["failed"] is True and result["failed_checks"] == ["engine_link"]
    assert result["link_mtu"] is None


def test_ports_held_by_the_toolkits_own_unit_pass(fake, run_module):
    (fake.proc / "26192" / "cgroup").write_text((HOST / "cgroup_v2_service_laurel228.txt").read_text())
    args = dict(accelerator="cpu", ports=[6379, 8000, 29555], owner_units=["nginx.service"])
    result = run_module(gpu_preflight_info, args)
    assert result["ok"] is True, result.get("msg")
    assert result["checks"][0]["detail"] == (
        "6379 held by the toolkit's own nginx.service (python3, pid 26192); "
        "8000 held by the toolkit's own nginx.service (python3, pid 26192); 29555 free"
    )
    assert "ss -Htlnp" in fake.commands()
    other = run_module(gpu_preflight_info, dict(args, owner_units=["ray.service", "vllm.service"]))
    assert other["failed"] is True
    assert other["checks"][0]["detail"].startswith("6379 held by python3 (pid 26192, nginx.service); ")


def test_ss_without_process_names(fake, run_module):
    fake.print("ss", HOST / "ss_Htln_dev_container.txt")
    result = run_module(gpu_preflight_info, dict(accelerator="cpu", ports=[8000], on_failure="warn"))
    assert result["ok"] is False
    assert result["checks"][0]["detail"] == "8000 held by a process ss did not name (run the check as root)"


def test_failed_tool(fake, run_module):
    fake.print("ss", HOST / "ss_Htln_dev_container.txt", rc=1)
    result = run_module(gpu_preflight_info, dict(accelerator="cpu", ports=[8000]))
    assert result["failed"] is True
    assert result["checks"][0]["detail"].startswith("`ss -Htlnp` failed (rc=1)")


# ---- disk ----------------------------------------------------------------------

def test_disk_counts_staged_files_and_measures_a_missing_path_on_its_parent(fake, run_module, tmp_path):
    model = tmp_path / "models" / "m"
    model.mkdir(parents=True)
    (model / "model.safetensors").write_bytes(b"\0" * 4096)
    (model / "link").symlink_to(model / "model.safetensors")
    st = os.statvfs(model)
    free_gib = st.f_bavail * st.f_frsize / 1024 ** 3
    result = run_module(gpu_preflight_info, dict(accelerator="cpu", disk_path=str(model), min_disk_gib=0.001))
    assert result["ok"] is True
    assert result["checks"][0]["detail"].startswith(f"{model}: ")
    assert "0.0 MiB already staged" in result["checks"][0]["detail"]  # 4 KiB, the link not counted
    missing = model / "not" / "yet"
    result = run_module(gpu_preflight_info, dict(accelerator="cpu", disk_path=str(missing),
                                                 min_disk_gib=round(free_gib * 2 + 1)))
    assert result["failed"] is True
    assert result["checks"][0]["detail"].startswith(f"{missing} (not there yet: measured on {model}): ")
    assert result["failed_checks"] == ["disk_free"]


# ---- clock, check mode, warn ----------------------------------------------------

def test_clock_offset(fake, run_module):
    result = run_module(gpu_preflight_info, dict(accelerator="cpu", controller_time=1000.0))
    assert result["ok"] is True and result["checks"] == []
    assert result["clock_offset_s"] == pytest.approx(result["now"] - 1000.0, abs=0.001)
    assert run_module(gpu_preflight_info, dict(accelerator="cpu"))["clock_offset_s"] is None


def test_check_mode_runs_the_same_and_changes_nothing(fake, run_module):
    fake.nvidia_smi(GB10_TABLE, GB10_CSV)
    args = dict(FIELD, ports=[29555])
    normal = run_module(gpu_preflight_info, args)
    checked = run_module(gpu_preflight_info, args, check_mode=True)
    assert checked["changed"] is False
    assert checked["checks"] == normal["checks"]


def test_warn_reports_without_failing(fake, run_module):
    fake.nvidia_smi(H100_TABLE)
    result = run_module(gpu_preflight_info, dict(min_gpu_memory_gib=100, on_failure="warn"))
    assert result.get("failed") is not True
    assert result["ok"] is False and result["failed_checks"] == ["gpu_memory"]
    assert result["message"] in warnings(result)


# ---- arguments -----------------------------------------------------------------

@pytest.mark.parametrize(
    "args,msg",
    [
        ({"accelerator": "tpu"}, "value of accelerator must be one of: gpu, cpu, got: tpu"),
        ({"on_failure": "ignore"}, "value of on_failure must be one of: fail, warn, got: ignore"),
        ({"disk_path": "/srv"}, "parameters are required together: disk_path, min_disk_gib"),
        ({"min_disk_gib": 1}, "parameters are required together: disk_path, min_disk_gib"),
        ({"min_gpus": "two"},
         "argument 'min_gpus' is of type str and we were unable to convert to int:"
         " \"'two'\" cannot be converted to an int"),
        ({"ports": ["http"]},
         "Elements value for option 'ports' is of type str and we were unable to convert to int: "
         "\"'http'\" cannot be converted to an int"),
        # In-process the module's name reads basic.py; through AnsiballZ it is gpu_preflight_info.
        ({"bogus": 1}, "Unsupported parameters for (basic.py) module: bogus. Supported parameters include: "
         "accelerator, address, controller_time, disk_path, interface, min_cuda_version, min_disk_gib, "
         "min_gpu_memory_gib, min_gpus, nvidia_smi, on_failure, owner_units, peer_addresses, ports, service_address."),
        ({"min_cuda_version": "twelve"}, "min_cuda_version must be a version such as 12.8, got 'twelve'"),
        ({"min_gpus": -1}, "min_gpus must be 0 or more, got -1"),
        ({"ports": [8000, 0, 70000]}, "ports must be between 1 and 65535, got 0, 70000"),
        ({"address": "10.0.0.300"}, "address must be an IPv4 address, got '10.0.0.300'"),
        ({"peer_addresses": ["10.0.0.12", "spark2"]}, "peer_addresses must be IPv4 addresses, got 'spark2'"),
    ],
)
def test_argument_errors(run_module, args, msg):
    result = run_module(gpu_preflight_info, dict({"accelerator": "cpu"}, **args))
    assert result["failed"] is True
    assert result["msg"] == msg
