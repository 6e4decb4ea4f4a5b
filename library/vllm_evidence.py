#!/usr/bin/python
# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Keep an engine host's evidence before a restart: its processes' stacks, journals,
memory and pressure, GPU state, masked (logic: module_utils/watch/evidence.py)."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_evidence
short_description: Keep an engine host's evidence before a restart (stacks, journals, memory, pressure, GPU), masked
description:
  - A restart cures the symptom; this keeps what lets an operator find the cause (docs/watch.md). On one engine
    host, before its units stop, it writes one gzipped tar, C(<dest_dir>/<engine>-<host>-<UTC time>.tar.gz), mode
    0600, holding text files
  - C(stacks-<pid>.txt) for each Python process of the O(units) (the API server, the engine core, Ray's workers),
    by C(py-spy dump), which stops each process only for the moment it reads it (py-spy from O(py_spy); without
    it the bundle says so).
  - C(journal.txt), the last O(journal_lines) lines of the O(units)' journals; C(processes.txt), the processes
    and their command lines; C(meminfo.txt) and C(pressure.txt) (C(/proc/meminfo), C(/proc/pressure/*));
    C(gpu.txt), C(nvidia-smi -q) where there is one.
  - Every file is masked first, the O(secrets) and any secret-looking word alike.
  - Nothing it fails to read stops it (the restart must go on); C(missing) says what is not in the bundle, and why.
options:
  engine:
    description: The engine's name (vllm_fleet_engine), in the bundle's name.
    type: str
    required: true
  units:
    description: The engine's systemd units on this host, whose processes and journals are kept.
    type: list
    elements: str
    required: true
  dest_dir:
    description: Where the bundle is written on the host (created, 0700).
    type: path
    required: true
  secrets:
    description: Values to mask wherever they appear (the engine's API key, tokens).
    type: list
    elements: str
    default: []
  py_spy:
    description: The py-spy executable.
    type: path
    required: true
  journal_lines:
    description: How many of the units' last journal lines to keep.
    type: int
    default: 300
  timeout:
    description: Seconds each command (one py-spy dump, the journal) may take.
    type: int
    default: 20
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
author:
  - vllm-fleet developers
"""

EXAMPLES = r"""
- name: Keep the evidence before the restart
  vllm_evidence:
    engine: engine_a
    units: [vllm.service, ray.service]
    dest_dir: /var/lib/vllm-fleet/evidence
    py_spy: /opt/vllm-fleet-tools/bin/py-spy
    secrets: ["{{ vllm_server_api_key }}"]
  no_log: false
"""

RETURN = r"""
bundle:
  description: The bundle written (or that would be).
  returned: always
  type: str
files:
  description: The files in the bundle.
  returned: always
  type: list
  elements: str
processes:
  description: The Python processes whose stacks were dumped, as C(pid) and C(command) (masked).
  returned: always
  type: list
  elements: dict
missing:
  description: What is not in the bundle, and why, one line each.
  returned: always
  type: list
  elements: str
msg:
  description: What was kept.
  returned: always
  type: str
"""

import datetime
import io
import os
import socket
import tarfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.flags.cmdline import read_proc_cmdline
from ansible.module_utils.flags.errors import SourceError
from ansible.module_utils.watch import evidence
from ansible.module_utils.watch.errors import WatchError

ARGUMENT_SPEC = dict(
    engine=dict(type="str", required=True),
    units=dict(type="list", elements="str", required=True),
    dest_dir=dict(type="path", required=True),
    secrets=dict(type="list", elements="str", default=[], no_log=True),
    py_spy=dict(type="path", required=True),
    journal_lines=dict(type="int", default=300),
    timeout=dict(type="int", default=20),
)
# Where cgroup v2 is mounted (the units' processes are read from it).
CGROUP_ROOT = "/sys/fs/cgroup"
# Where systemd keeps a unit's processes: the unified hierarchy (cgroup v2), else a hybrid
# host's unified or named systemd hierarchy (cgroup v1, as in containers of older hosts).
CGROUP_HIERARCHIES = ("", "/unified", "/systemd")
# The most a file of the bundle keeps (a stack dump of thousands of threads is still evidence).
MAX_FILE = 4 * 1024 * 1024


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read(MAX_FILE).decode("utf-8", "replace")
    except OSError:
        return None


def _unit_pids(module, unit):
    """The processes in the unit's cgroup (and its children), from systemd's ControlGroup."""
    rc, out, _err = module.run_command(["systemctl", "show", "-p", "ControlGroup", "--value", unit],
                                       environ_update={"LC_ALL": "C"})
    group = out.strip()
    if rc != 0 or not group:
        return None
    pids = set()
    for hierarchy in CGROUP_HIERARCHIES:
        top = CGROUP_ROOT + hierarchy + group
        if not os.path.isdir(top):
            continue
        for root, _dirs, names in os.walk(top):
            if "cgroup.procs" in names:
                text = _read(os.path.join(root, "cgroup.procs")) or ""
                pids.update(int(x) for x in text.split() if x.isdigit())
        if pids:
            break
    return sorted(pids)


def _run(module, argv, timeout):
    rc, out, err = module.run_command(["timeout", str(timeout)] + argv, environ_update={"LC_ALL": "C"})
    return rc, (out + (("\n" + err) if err.strip() else ""))[:MAX_FILE]


def _listed(module, units: list, missing: list) -> list:
    """(pid, argv) of every process in the units' control groups; what could not be read goes to ``missing``."""
    listed = []
    for unit in units:
        pids = _unit_pids(module, unit)
        if pids is None:
            missing.append("%s: systemd knows no control group for it (not running here)" % unit)
            continue
        if not pids:
            missing.append("%s: no process found in its control group (stopped?)" % unit)
        for pid in pids:
            try:
                listed.append((pid, read_proc_cmdline(pid)))
            except SourceError:  # gone since the group was read, or a zombie
                continue
    return listed


def _stacks(module, p: dict, procs: list, files: dict, missing: list) -> None:
    """py-spy's dump of each Python process, as stacks-<pid>.txt."""
    if not os.access(p["py_spy"], os.X_OK):
        missing.append(
            "stacks: %s is not there (roles/vllm_install puts py-spy in vllm_fleet_tools_venv)" % p["py_spy"])
        return
    for pid, _command in procs:
        rc, out = _run(module, [p["py_spy"], "dump", "--pid", str(pid)], p["timeout"])
        if rc != 0:
            # A stopped process (a wedge's engine core, SIGSTOPped) cannot be suspended: read
            # it without suspending, which is the stack that matters most.
            rc, again = _run(module, [p["py_spy"], "dump", "--nonblocking", "--pid", str(pid)], p["timeout"])
            out += "\n--- again with --nonblocking (the process could not be suspended) ---\n" + again
        files["stacks-%d.txt" % pid] = out
        if rc != 0:
            missing.append("stacks of %d: py-spy exited %d (see stacks-%d.txt)" % (pid, rc, pid))


def _host(module, p: dict, files: dict, missing: list) -> None:
    """The units' journal, the host's memory and pressure, and the GPU's state."""
    units = [w for u in p["units"] for w in ("-u", u)]
    rc, out = _run(module, ["journalctl", "--no-pager", "-o", "short-iso", "-n", str(p["journal_lines"])] + units,
                    p["timeout"])
    files["journal.txt"] = out
    if rc != 0:
        missing.append("journal: journalctl exited %d" % rc)
    files["meminfo.txt"] = _read("/proc/meminfo") or ""
    pressure = []
    for kind in ("cpu", "memory", "io"):
        text = _read("/proc/pressure/" + kind)
        if text is None:
            missing.append("pressure: /proc/pressure/%s cannot be read (PSI off in this kernel)" % kind)
        else:
            pressure.append("%s\n%s" % (kind, text))
    files["pressure.txt"] = "\n".join(pressure)
    smi = module.get_bin_path("nvidia-smi")
    if smi:
        _rc, files["gpu.txt"] = _run(module, [smi, "-q"], p["timeout"])
    else:
        missing.append("gpu: no nvidia-smi on this host")


def _write(bundle: str, name: str, files: dict, secrets) -> None:
    """The bundle, 0600, its secrets masked, written whole or not at all (a temporary file, then a rename)."""
    os.makedirs(os.path.dirname(bundle), mode=0o700, exist_ok=True)
    tmp = bundle + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for fname, text in sorted(files.items()):
            data = evidence.mask(text, secrets).encode("utf-8")
            info = tarfile.TarInfo("%s/%s" % (name, fname))
            info.size, info.mode = len(data), 0o600
            info.mtime = int(datetime.datetime.now().timestamp())
            tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, bundle)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    host = socket.gethostname().split(".")[0]
    try:
        secrets = evidence.secrets_of(p["secrets"])
        name = evidence.bundle_name(p["engine"], host, datetime.datetime.now(datetime.UTC))
    except WatchError as exc:
        module.fail_json(msg="cannot keep engine %s's evidence: %s" % (p["engine"], exc))
    bundle = os.path.join(p["dest_dir"], name + ".tar.gz")
    if module.check_mode:
        module.exit_json(changed=True, bundle=bundle, files=[], processes=[], missing=[],
                         msg="check mode: would keep %s" % bundle)
    files, missing = {}, []
    listed = _listed(module, p["units"], missing)
    files["processes.txt"] = "".join("%d %s\n" % (pid, " ".join(argv)) for pid, argv in listed)
    try:
        procs = evidence.python_processes(listed)
    except WatchError as exc:
        module.fail_json(msg="cannot keep engine %s's evidence: %s" % (p["engine"], exc))
    _stacks(module, p, procs, files, missing)
    _host(module, p, files, missing)
    files["missing.txt"] = "".join(line + "\n" for line in missing)
    _write(bundle, name, files, secrets)
    module.exit_json(changed=True, bundle=bundle, files=sorted(files),
                     processes=[{"pid": pid, "command": command} for pid, command in procs], missing=missing,
                     msg="%s: %d files, the stacks of %d processes%s" % (
                         bundle, len(files), len([f for f in files if f.startswith("stacks-")]),
                         "; missing: %d" % len(missing) if missing else ""))


if __name__ == "__main__":
    main()
