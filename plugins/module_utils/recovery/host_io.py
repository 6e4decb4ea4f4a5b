"""The real engine host for the power-cut recovery (:class:`HostIO`: systemctl,
sockets, urllib, the engine's venv for Ray) and vllm-fleet-recover's entry
point (:func:`main`), which roles/engine_recovery's runner calls.

Stdlib only: roles/engine_recovery copies this file to each engine host (see
recovery/__init__.py).
"""
from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.error
import urllib.request

try:  # under Ansible (the unit tests), else on the host at the same path below the lib dir
    from ansible.module_utils.host.ray_cluster import PROBE, RayProbeError, parse_probe_output
except ImportError:  # pragma: no cover - the host's copy
    from host.ray_cluster import PROBE, RayProbeError, parse_probe_output

from .config import MODES, Config, ConfigError, load_config
from .loop import Host, Recovery


def _knock(address: str, port: int) -> str:
    """A TCP connection to the port: "open", "refused" (the host's kernel answered), or
    "silent" (a timeout, no route: nothing answered)."""
    try:
        with socket.create_connection((address, port), timeout=2):
            return "open"
    except ConnectionRefusedError:
        return "refused"
    except OSError:
        return "silent"


class HostIO(Host):
    """The real host: systemctl, sockets, urllib, the engine's venv for Ray."""

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def boot_id(self) -> str:
        return (self.read("/proc/sys/kernel/random/boot_id") or "").strip()

    def read(self, path: str) -> str | None:
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read(1 << 20)
        except (OSError, UnicodeDecodeError):
            return None

    def write(self, path: str, text: str) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def unit_state(self, unit: str) -> tuple:
        out = subprocess.run(["systemctl", "show", "-p", "ActiveState", "-p", "InvocationID", "--", unit],
                             capture_output=True, text=True, check=False, timeout=30).stdout
        values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        return values.get("ActiveState", "unknown"), values.get("InvocationID", "")

    def start(self, unit: str) -> None:
        # --no-block: a vLLM start takes minutes (TimeoutStartSec=infinity); the loop watches it.
        subprocess.run(["systemctl", "start", "--no-block", "--", unit], check=False, timeout=60)

    def stop(self, unit: str) -> None:
        subprocess.run(["systemctl", "stop", "--", unit], check=False, timeout=600)

    def answers(self, address: str, port: int) -> bool:
        """The host is up: a connection, or a refusal (its kernel answered)."""
        return _knock(address, port) != "silent"

    def listens(self, address: str, port: int) -> bool:
        return _knock(address, port) == "open"

    def health(self, url: str) -> int | None:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - the role's own URL
                return resp.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except (OSError, ValueError):
            return None

    def ray_nodes(self, cfg: Config) -> dict | None:
        address = f"{cfg.head_address}:{cfg.ray_port}"
        cmd = ["timeout", "60", cfg.python, "-c", PROBE, address]
        if cfg.user:
            cmd = ["runuser", "-u", cfg.user, "--"] + cmd
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=90,
                                  env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
            cluster = parse_probe_output(proc.stdout)
        except (OSError, subprocess.SubprocessError, RayProbeError):
            return None
        return {n.node_ip: n.node_id for n in cluster.alive}

    def log(self, line: str) -> None:
        print(line, flush=True)

    def lock(self, wait: bool) -> bool:
        import fcntl

        os.makedirs("/run/vllm-fleet", exist_ok=True)
        # Held until the process exits (kept open on purpose).
        self._lock = open("/run/vllm-fleet/recover.lock", "w")  # noqa: SIM115
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            return False
        return True


def main(argv, host: Host | None = None, config_path: str = "/etc/vllm-fleet/recover.json") -> int:
    """vllm-fleet-recover boot|check [--config PATH]."""
    host = host or HostIO()
    args = list(argv)
    if "--config" in args:
        i = args.index("--config")
        config_path = args[i + 1]
        del args[i:i + 2]
    if len(args) != 1 or args[0] not in MODES:
        host.log("usage: vllm-fleet-recover boot|check [--config PATH]")
        return 2
    text = host.read(config_path)
    if text is None:
        host.log(f"no {config_path}: the role engine_recovery writes it")
        return 2
    try:
        cfg = load_config(text)
    except ConfigError as exc:
        host.log(f"{config_path}: {exc}")
        return 2
    # The boot run waits for a check that is running; a check finding a run under way leaves it be.
    if not host.lock(wait=args[0] == "boot"):
        host.log(f"engine {cfg.engine}: another recovery run is under way; this check leaves it be")
        return 0
    return Recovery(host, cfg, args[0]).run()
