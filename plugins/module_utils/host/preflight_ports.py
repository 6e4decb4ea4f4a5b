"""The ports check of a host's preflight: who listens (``ss -Htlnp``) and in which
systemd unit (``/proc/<pid>/cgroup``). Pure; see :mod:`gpu_preflight` for the verdict's shape."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ansible.module_utils.host.gpu_preflight import Check, PreflightError, program_lines


@dataclass
class Listener:
    address: str
    port: int
    processes: list = field(default_factory=list)  # [(name, pid)]


# The name is the process's comm (15 characters at most; 256 leave room for escapes), so a
# hostile run of escapes never stacks a backtracking point per character. Linux pids stop at
# 2**22 (pid_max): 7 digits; ten leave room and stay far below int()'s limit.
_SS_PROCESS = re.compile(r'\("((?:[^"\\]|\\.){0,256})",pid=([0-9]{1,10})(?![0-9])')
_ASCII_NUMBER = re.compile(r"[0-9]+")


def parse_ss(text: str) -> list:
    """``ss -Htln`` / ``ss -Htlnp`` (no header) as :class:`Listener` s.

    The process column appears only with ``-p`` and only for sockets the
    caller may inspect (root sees all). A listener whose port is not a port
    number (0 to 65535 in ASCII digits) is skipped, a process whose pid is not
    a pid is left out. Raises :class:`PreflightError` (only) for a line whose
    Recv-Q is not a number: a header or another program's output.
    """
    listeners = []
    for line in program_lines(text):
        parts = line.split()
        if len(parts) < 5:
            continue
        if not _ASCII_NUMBER.fullmatch(parts[1]):
            raise PreflightError(f"not `ss -Htln` output (a header or another format?): {line.strip()[:200]}")
        local = parts[3]
        host, _, port = local.rpartition(":")
        if not (_ASCII_NUMBER.fullmatch(port) and len(port) <= 5 and int(port) <= 65535):
            continue
        procs = [(m.group(1), int(m.group(2))) for m in _SS_PROCESS.finditer(" ".join(parts[5:]))]
        listeners.append(Listener(address=host, port=int(port), processes=procs))
    return listeners


def cgroup_units(text: str) -> list:
    """The systemd units (``*.service``, ``*.scope``) on a ``/proc/<pid>/cgroup`` path,
    in order, each once. Never raises (no units for anything but a string)."""
    units = {}  # a dict keeps the order and finds a repeat in constant time
    for line in program_lines(text):
        path = line.split(":", 2)[-1]
        for part in path.split("/"):
            if part.endswith((".service", ".scope")):
                units.setdefault(part, None)
    return list(units)


def check_ports(ports, listeners, units_by_pid: dict, owner_units) -> Check | None:
    """The required ports are free, or held by the toolkit's own units.

    A listener counts as the toolkit's own when one of its processes runs in
    the cgroup of a unit in ``owner_units`` (``ray.service``,
    ``vllm.service``): on a re-run Ray and vLLM hold these ports themselves.
    """
    if not ports:
        return None
    owners = set(owner_units or [])
    free, ours, busy = [], [], []
    for port in ports:
        held = [lst for lst in listeners if lst.port == port]
        if not held:
            free.append(str(port))
            continue
        procs = [p for lst in held for p in lst.processes]
        if not procs:
            busy.append(f"{port} held by a process ss did not name (run the check as root)")
            continue
        unit_names = {pid: units_by_pid.get(pid, []) for _, pid in procs}
        foreign = [(n, pid) for n, pid in procs if not owners.intersection(unit_names[pid])]
        if foreign:
            who = ", ".join(
                f"{n} (pid {pid}{', ' + ' '.join(unit_names[pid]) if unit_names[pid] else ''})" for n, pid in foreign
            )
            busy.append(f"{port} held by {who}")
        else:
            name, pid = procs[0]
            unit = next(u for u in unit_names[pid] if u in owners)
            ours.append(f"{port} held by the toolkit's own {unit} ({name}, pid {pid})")
    parts = busy + ours + ([", ".join(free) + " free"] if free else [])
    detail = "; ".join(parts)
    if busy:
        return Check(
            "ports_free",
            False,
            detail,
            "Stop the other service, or move the engine to free ports (Ray's GCS port, the vLLM API port, "
            "the mp master port) and list them in ports. See `ss -Htlnp 'sport = :PORT'`.",
        )
    return Check("ports_free", True, detail)
