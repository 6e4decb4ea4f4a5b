"""Summarise a Ray cluster's node table (``ray.nodes()``) for a join barrier.

Pure logic: the module runs Ray's own API in the engine's venv and hands the
JSON here.

The JSON is read as ``ray.nodes()`` prints it and nothing looser: a list of
node dicts, ``Alive`` a boolean, ``Resources`` a dict of finite non-negative
numbers, addresses and ids strings. Anything else (brackets nested past the
decoder's recursion limit, NaN or Infinity, a string or a huge int where a
number belongs, a list where a dict belongs) raises :class:`RayProbeError`,
and nothing else is raised: a string "false" must not read as alive, nor "1_0"
as ten GPUs.

Standard library only: roles/engine_recovery copies this file, by its path
below plugins/module_utils/, to each engine host, where the recovery package's
host_io.py imports it.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field

# The pause between two probes of a wait (ray_cluster_info's poll_s): each
# probe starts a Python that imports Ray, a second or more of CPU on the head,
# so they never run back to back.
POLL_S = 1.0
# The probe's line: this prefix, then ray.nodes() as JSON.
PREFIX = "RAY_NODES_JSON="
# Runs inside the engine's venv as the Ray user: prints ray.nodes() as JSON.
PROBE = (
    "import json, sys, ray\n"
    "ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False)\n"
    f"print({PREFIX!r} + json.dumps(ray.nodes(), default=str))\n"
)


class RayProbeError(Exception):
    """The probe's output could not be read."""


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


@dataclass
class RayNode:
    node_ip: str
    alive: bool
    gpus: float
    cpus: float
    node_id: str = ""


@dataclass
class RayCluster:
    nodes: list = field(default_factory=list)

    @property
    def alive(self) -> list:
        return [n for n in self.nodes if n.alive]

    @property
    def gpus_total(self) -> float:
        return sum(n.gpus for n in self.alive)

    def missing(self, expected_ips) -> list:
        have = {n.node_ip for n in self.alive}
        return [ip for ip in expected_ips if ip not in have]

    def as_dict(self) -> dict:
        return {
            "nodes": [asdict(n) for n in self.nodes],
            "nodes_alive": len(self.alive),
            "gpus_total": self.gpus_total,
            "alive_ips": sorted(n.node_ip for n in self.alive),
        }


def parse_probe_output(text: str) -> RayCluster:
    """Read the probe's stdout; Ray may print its own lines around ours.

    The last ``RAY_NODES_JSON=`` line counts (``print`` ends it with ``\\n``; the
    JSON is ASCII, so no other line break can be inside it). Raises
    :class:`RayProbeError` only.
    """
    if not isinstance(text, str):
        raise RayProbeError("the Ray probe printed no node table")
    for line in reversed(text.split("\n")):
        if line.startswith(PREFIX):
            try:
                raw = json.loads(line[len(PREFIX):], parse_constant=_no_constant)
            except RecursionError:
                raise RayProbeError("the Ray probe printed JSON nested too deep to read") from None
            except ValueError as exc:  # JSONDecodeError, an int past 4,300 digits, NaN
                raise RayProbeError(f"the Ray probe printed invalid JSON: {str(exc)[:200]}") from None
            return parse_nodes(raw)
    raise RayProbeError("the Ray probe printed no node table")


def _string(entry: dict, key: str, where: str) -> str:
    value = entry.get(key, "")
    if not isinstance(value, str):
        raise RayProbeError(f"{where}: {key} is a {type(value).__name__}, not a string")
    return value


def _amount(resources: dict, key: str, where: str) -> float:
    """A resource amount: a finite number, 0 or more (not a bool, not a string)."""
    value = resources.get(key, 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RayProbeError(f"{where}: Resources.{key} is a {type(value).__name__}, not a number")
    try:
        amount = float(value)
    except OverflowError:  # an int past a float's range
        amount = math.inf
    if not math.isfinite(amount) or amount < 0:
        raise RayProbeError(f"{where}: Resources.{key} is not a finite amount of 0 or more")
    return amount


def parse_nodes(raw) -> RayCluster:
    """``ray.nodes()`` (decoded JSON) as a :class:`RayCluster`; RayProbeError (only) when
    it is not a node table."""
    if not isinstance(raw, list):
        raise RayProbeError("ray.nodes() did not return a list")
    nodes = []
    for number, entry in enumerate(raw):
        if not isinstance(entry, dict):
            raise RayProbeError(f"ray.nodes() returned a {type(entry).__name__} where a node (a dict) belongs")
        where = f"node {number + 1} of ray.nodes()"
        alive = entry.get("Alive", entry.get("alive", False))
        if not isinstance(alive, bool):
            raise RayProbeError(f"{where}: Alive is a {type(alive).__name__}, not true or false")
        res = entry.get("Resources")
        res = {} if res is None else res
        if not isinstance(res, dict):
            raise RayProbeError(f"{where}: Resources is a {type(res).__name__}, not a dict")
        nodes.append(
            RayNode(
                node_ip=_string(entry, "NodeManagerAddress", where),
                alive=alive,
                gpus=_amount(res, "GPU", where),
                cpus=_amount(res, "CPU", where),
                node_id=_string(entry, "NodeID", where),
            )
        )
    return RayCluster(nodes=nodes)


def verdict(cluster: RayCluster, expected_ips, expected_gpus: float | None):
    """Return (ok, message) for a join barrier."""
    missing = cluster.missing(expected_ips)
    problems = []
    if missing:
        problems.append(f"nodes not joined: {', '.join(missing)}")
    if expected_gpus is not None and cluster.gpus_total != float(expected_gpus):
        problems.append(
            f"the cluster offers {cluster.gpus_total:g} GPU(s), the engine needs {float(expected_gpus):g}"
        )
    if problems:
        return False, "; ".join(problems)
    return True, (
        f"{len(cluster.alive)} node(s) alive ({', '.join(sorted(n.node_ip for n in cluster.alive))}), "
        f"{cluster.gpus_total:g} GPU(s)"
    )
