#!/usr/bin/python
# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check that an engine host can run its share of the engine."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_preflight_info
short_description: Check an engine host's GPU, network, ports, disk and clock before provisioning
description:
  - Read-only preflight of one engine host. Every check gives one verdict
    C({check, ok, detail, hint}) in RV(checks); the module fails (or warns, see O(on_failure)) with one
    message that lists every failed check and what to do about it.
  - C(gpu_driver) runs C(nvidia-smi) and classifies its whole-output failures (driver not loaded,
    driver/library mismatch, no devices, NVML unknown error). C(gpu_count) compares the GPUs it sees with
    O(min_gpus). C(cuda_version) compares the CUDA version in the table's header (C(CUDA Version), or
    C(CUDA UMD Version) from R610 on) with O(min_cuda_version).
  - C(gpu_memory) checks that every GPU has O(min_gpu_memory_gib). On unified-memory GPUs (GB10 / DGX
    Spark, Jetson) C(nvidia-smi) reports C([N/A]) or C(Not Supported) instead of a size; the module then
    takes the host's C(MemTotal) from C(/proc/meminfo), says so in the detail and sets
    RV(memory_source=host meminfo). It never reads C([N/A]) as 0.
  - The GPU names and memory come from
    C(nvidia-smi --query-gpu=index,name,uuid,memory.total,memory.used,driver_version,compute_cap --format=csv,nounits)
    (the table truncates long names); when a driver does not know a field the table alone is used.
  - C(engine_interface) checks that O(interface) exists and holds O(address), the address given to
    C(VLLM_HOST_IP), C(NCCL_SOCKET_IFNAME) and C(GLOO_SOCKET_IFNAME). C(engine_subnet) checks that
    O(peer_addresses) are on that interface's subnet. C(engine_link) checks that the interface is up with a
    carrier (C(ip -o link show)), and the module returns its MTU (RV(link_mtu)), from which the C(gpu_preflight)
    role checks that both ends of an engine's link agree.
  - C(service_address) checks that O(service_address), where the API answers the consumers, is on an interface
    of the host; it runs when that address differs from O(address) (a site with a LAN and an engine link).
  - C(ports_free) reads C(ss -Htlnp) for O(ports). A port held by a process of one of O(owner_units)
    (by its C(/proc/PID/cgroup)) counts as free, since on a re-run the toolkit's own Ray and vLLM hold them.
  - C(disk_free) checks free space plus what is already staged at O(disk_path) against O(min_disk_gib).
  - The module also returns the host's clock (RV(now)) and, given O(controller_time), its offset from the
    controller (RV(clock_offset_s)), from which the C(gpu_preflight) role checks the skew between an
    engine's hosts.
options:
  accelerator:
    description:
      - C(gpu) runs the GPU checks. C(cpu) skips them (C(gpu_driver), C(gpu_count), C(gpu_memory),
        C(cuda_version)) and runs the others; for the CPU lab.
    type: str
    choices: [gpu, cpu]
    default: gpu
  nvidia_smi:
    description: The C(nvidia-smi) to run, a name looked up on C(PATH) or a path.
    type: str
    default: nvidia-smi
  min_gpus:
    description: GPUs this host must show.
    type: int
    default: 1
  min_gpu_memory_gib:
    description:
      - GiB each GPU must have. For unified memory, the host's C(MemTotal) (about 121.7 GiB on a 128 GB
        DGX Spark). C(0) reports without a minimum.
    type: float
    default: 0
  min_cuda_version:
    description: The lowest CUDA version the driver must support, such as C(12.8). Unset, it is reported only.
    type: str
  interface:
    description: The interface of the engine's subnet (C(NCCL_SOCKET_IFNAME)). Unset, O(address) is looked up on any
      interface.
    type: str
  address:
    description: This host's IPv4 address in the engine (C(VLLM_HOST_IP)).
    type: str
  service_address:
    description: This host's IPv4 address where consumers reach its API; checked when it differs from O(address).
    type: str
  peer_addresses:
    description: The IPv4 addresses of the engine's other hosts, which must be on O(interface)'s subnet.
    type: list
    elements: str
    default: []
  ports:
    description: TCP ports the engine listens on (Ray GCS, the vLLM API, the mp master port).
    type: list
    elements: int
    default: []
  owner_units:
    description:
      - systemd units whose processes may hold O(ports) (the toolkit's own Ray and vLLM units), matched
        against each listener's C(/proc/PID/cgroup).
    type: list
    elements: str
    default: []
  disk_path:
    description:
      - Where the model is (or will be) staged, an absolute path (a relative one fails C(disk_free)). It may not
        exist yet; its nearest existing parent is measured.
      - O(disk_path) and O(min_disk_gib) are required together.
    type: path
  min_disk_gib:
    description: GiB the model needs at O(disk_path), counting what is already staged there.
    type: float
  controller_time:
    description:
      - The controller's clock (epoch seconds) when the task was sent, templated from Jinja's C(now)
        function as in the examples. Gives RV(clock_offset_s).
    type: float
  on_failure:
    description: C(fail) fails the task when a check fails; C(warn) returns with RV(ok=false) and a warning.
    type: str
    choices: [fail, warn]
    default: fail
attributes:
  check_mode:
    support: full
    description: Reads only; runs the same in check mode.
  diff_mode:
    support: none
notes:
  - Run it as root (C(become)) so C(ss) names the processes that hold the ports.
  - Needs C(ip) and C(ss) (iproute2) for the network and port checks.
seealso:
  - name: NVIDIA DGX Spark known issues (nvidia-smi reports memory as Not Supported)
    description: >-
      Why GB10 has no GPU memory size. C(docs/preflight.md) in this repository says what to do when each check
      fails.
    link: https://docs.nvidia.com/dgx/dgx-spark/known-issues.html
author:
  - vllm-fleet developers
"""

EXAMPLES = r"""
- name: Check a DGX Spark before it joins engine_a
  gpu_preflight_info:
    min_gpus: 1
    min_gpu_memory_gib: 100
    min_cuda_version: "12.8"
    interface: enp1s0f1np1
    address: 192.168.177.11
    peer_addresses: [192.168.177.12]
    ports: [6379, 8000, 29555]
    owner_units: [ray.service, vllm.service]
    disk_path: /srv/models/model
    min_disk_gib: 200
    controller_time: "{{ now().timestamp() }}"
  become: true
  register: preflight

- name: Lab host without a GPU, report only
  gpu_preflight_info:
    accelerator: cpu
    interface: eth0
    ports: [6379, 8000]
    on_failure: warn
"""

RETURN = r"""
ok:
  description: Whether every check passed.
  returned: always
  type: bool
message:
  description: One line when everything passed, otherwise every failed check with its C(fix:) hint, one per line.
  returned: always
  type: str
  sample: "1 of 7 preflight checks failed:\n- ports_free: 8000 held by python3 (pid 4242)\n  fix: Stop the other
    service..."
checks:
  description: One verdict per check, in order.
  returned: always
  type: list
  elements: dict
  contains:
    check:
      description: The check's name (C(gpu_driver), C(gpu_count), C(gpu_memory), C(cuda_version),
        C(engine_interface), C(engine_link), C(engine_subnet), C(service_address), C(ports_free), C(disk_free)).
      type: str
    ok:
      description: Whether it passed.
      type: bool
    detail:
      description: What was measured against what was required.
      type: str
    hint:
      description: What to do when it failed; empty when it passed.
      type: str
failed_checks:
  description: Names of the failed checks.
  returned: always
  type: list
  elements: str
skipped_checks:
  description: Names of the checks not run (the GPU checks with O(accelerator=cpu)).
  returned: always
  type: list
  elements: str
report:
  description: The checks as readable lines, C(PASS name detail) or C(FAIL name detail) with a C(fix:) line.
  returned: always
  type: list
  elements: str
gpus:
  description: The GPUs C(nvidia-smi) shows; memory in MiB, C(null) when not reported (unified memory); C(bus_id)
    C(null) where the table prints N/A for it (an integrated GPU such as Jetson's).
  returned: always
  type: list
  elements: dict
  sample:
    - index: 0
      name: NVIDIA GB10
      uuid: GPU-2dee1e25-b3b5-007e-2b55-79f2d0f2ebe5
      bus_id: 0000000F:01:00.0
      memory_total_mib: null
      memory_used_mib: null
      compute_cap: "12.1"
      mig_mode: null
      unified_memory: true
gpu_count:
  description: How many GPUs C(nvidia-smi) shows.
  returned: always
  type: int
driver_version:
  description: The driver version, C(null) when not known.
  returned: always
  type: str
  sample: 580.126.09
cuda_version:
  description: The CUDA version the driver supports (table header), C(null) when not known.
  returned: always
  type: str
  sample: "13.0"
unified_memory:
  description: Whether a GPU shares the host's memory (C(nvidia-smi) reports no memory size).
  returned: always
  type: bool
memory_source:
  description: Where C(gpu_memory) read the size, C(gpu) or C(host meminfo); C(null) when not checked.
  returned: always
  type: str
  sample: host meminfo
now:
  description: The host's clock when the module started, epoch seconds.
  returned: always
  type: float
clock_offset_s:
  description: RV(now) minus O(controller_time), C(null) without it. Differences between hosts are their clock skew.
  returned: always
  type: float
link_interface:
  description: O(interface), whose MTU RV(link_mtu) is; C(null) without O(interface).
  returned: always
  type: str
  sample: enp1s0f1np1
link_mtu:
  description: The MTU of O(interface), C(null) when it was not read (no such interface, or no O(interface)).
  returned: always
  type: int
  sample: 9000
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host.gpu_preflight import (
    GPU_CHECKS,
    Check,
    PreflightError,
    PreflightOptionError,
    command_failed,
    render_report,
    summarize,
    tool_missing,
    validate_options,
)
from ansible.module_utils.host.nvidia_smi import NvidiaSmiFailure, probe
from ansible.module_utils.host.preflight_disk import check_disk_path
from ansible.module_utils.host.preflight_gpu import (
    check_cuda_version,
    check_gpu_count,
    check_gpu_driver,
    check_gpu_memory,
)
from ansible.module_utils.host.preflight_network import (
    check_engine_subnet,
    check_interface,
    check_link_up,
    check_service_address,
    parse_ip_addr,
    parse_ip_link,
)
from ansible.module_utils.host.preflight_ports import cgroup_units, check_ports, parse_ss

ARGUMENT_SPEC = dict(
    accelerator=dict(type="str", choices=["gpu", "cpu"], default="gpu"),
    nvidia_smi=dict(type="str", default="nvidia-smi"),
    min_gpus=dict(type="int", default=1),
    min_gpu_memory_gib=dict(type="float", default=0),
    min_cuda_version=dict(type="str"),
    interface=dict(type="str"),
    address=dict(type="str"),
    service_address=dict(type="str"),
    peer_addresses=dict(type="list", elements="str", default=[]),
    ports=dict(type="list", elements="int", default=[]),
    owner_units=dict(type="list", elements="str", default=[]),
    disk_path=dict(type="path"),
    min_disk_gib=dict(type="float"),
    controller_time=dict(type="float"),
    on_failure=dict(type="str", choices=["fail", "warn"], default="fail"),
)

# Where the host's state is read; tests point these at fixtures.
MEMINFO = "/proc/meminfo"
SYS_CLASS_NET = "/sys/class/net"
PROC = "/proc"


def _validate(module):
    p = module.params
    try:
        validate_options(min_cuda_version=p["min_cuda_version"], min_gpus=p["min_gpus"], ports=p["ports"],
                         address=p["address"], peer_addresses=p["peer_addresses"],
                         service_address=p["service_address"],
                         min_gpu_memory_gib=p["min_gpu_memory_gib"], min_disk_gib=p["min_disk_gib"],
                         controller_time=p["controller_time"])
    except PreflightOptionError as exc:
        module.fail_json(msg=str(exc))


def _read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _probe_gpu(module):
    """Run nvidia-smi; return (report, error)."""
    name = module.params["nvidia_smi"]
    smi = name if os.sep in name else module.get_bin_path(name)
    if not smi or not os.access(smi, os.X_OK):
        return None, NvidiaSmiFailure(
            "not_installed",
            f"{name} not found or not executable",
            "Install the NVIDIA driver and its utilities (nvidia-smi comes with them), or set "
            "nvidia_smi to its path.",
        )
    return probe(smi, module.run_command, module.warn)


def _gpu_checks(module):
    p = module.params
    report, error = _probe_gpu(module)
    checks = [check_gpu_driver(report, error)]
    if error is not None:
        return checks, None, None
    checks.append(check_gpu_count(report, p["min_gpus"]))
    meminfo = _read(MEMINFO) if report.unified_memory else None
    memory, source = check_gpu_memory(report, p["min_gpu_memory_gib"], meminfo)
    checks.append(memory)
    checks.append(check_cuda_version(report, p["min_cuda_version"]))
    return checks, report, source


def _tool(module, name, check):
    path = module.get_bin_path(name)
    return (path, None) if path else (None, tool_missing(check, name))


def _network_checks(module):
    """The network's checks, and the engine interface's MTU (None when not read)."""
    p = module.params
    if not p["interface"] and not p["address"] and not p["service_address"]:
        return [], None
    ip, missing = _tool(module, "ip", "engine_interface")
    if missing:
        return [missing], None
    rc, out, err = module.run_command([ip, "-o", "-4", "addr", "show"])
    if rc != 0:
        return [command_failed("engine_interface", "ip -o -4 addr show", rc, err)], None
    addresses = parse_ip_addr(out)
    rc, out, err = module.run_command([ip, "-o", "link", "show"])
    if rc != 0:
        return [command_failed("engine_link", "ip -o link show", rc, err)], None
    links = parse_ip_link(out)
    try:
        interfaces = os.listdir(SYS_CLASS_NET)
    except OSError:
        interfaces = list(addresses)
    checks = []
    if p["interface"] or p["address"]:
        checks.append(check_interface(p["interface"], p["address"], interfaces, addresses))
        checks.append(check_link_up(p["interface"], links))
        checks.append(check_engine_subnet(p["interface"], p["address"], p["peer_addresses"], addresses))
    checks.append(check_service_address(p["service_address"], p["address"], addresses))
    link = links.get(p["interface"]) if p["interface"] else None
    return [c for c in checks if c is not None], (link.mtu if link else None)


def _port_checks(module):
    p = module.params
    if not p["ports"]:
        return []
    ss, missing = _tool(module, "ss", "ports_free")
    if missing:
        return [missing]
    rc, out, err = module.run_command([ss, "-Htlnp"])
    if rc != 0:
        return [command_failed("ports_free", "ss -Htlnp", rc, err)]
    try:
        listeners = parse_ss(out)
    except PreflightError as exc:
        return [Check("ports_free", False, str(exc), "Check that `ss` is iproute2's.")]
    pids = {pid for lst in listeners if lst.port in p["ports"] for _, pid in lst.processes}
    units = {pid: cgroup_units(_read(os.path.join(PROC, str(pid), "cgroup")) or "") for pid in pids}
    return [check_ports(p["ports"], listeners, units, p["owner_units"])]


def _disk_checks(module):
    p = module.params
    if p["disk_path"] is None:
        return []
    return [check_disk_path(p["disk_path"], p["min_disk_gib"])]


def main():
    started = time.time()
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_together=[("disk_path", "min_disk_gib")],
        supports_check_mode=True,
    )
    _validate(module)
    p = module.params
    checks, skipped, report, source = [], [], None, None
    if p["accelerator"] == "gpu":
        checks, report, source = _gpu_checks(module)
    else:
        skipped = list(GPU_CHECKS)
    network, link_mtu = _network_checks(module)
    checks += network + _port_checks(module) + _disk_checks(module)
    ok, failed, message = summarize(checks)
    gpus = report.as_dict() if report is not None else {}
    result = dict(
        changed=False,
        ok=ok,
        message=message,
        checks=[c.as_dict() for c in checks],
        failed_checks=failed,
        skipped_checks=skipped,
        report=render_report(checks),
        gpus=gpus.get("gpus", []),
        gpu_count=gpus.get("gpu_count", 0),
        driver_version=gpus.get("driver_version"),
        cuda_version=gpus.get("cuda_version"),
        unified_memory=gpus.get("unified_memory", False),
        memory_source=source,
        now=started,
        clock_offset_s=None if p["controller_time"] is None else round(started - p["controller_time"], 3),
        link_interface=p["interface"],
        link_mtu=link_mtu,
    )
    if not ok and p["on_failure"] == "fail":
        module.fail_json(msg=message, **result)
    if not ok:
        module.warn(message)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
