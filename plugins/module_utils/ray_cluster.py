"""Summarise a Ray cluster's node table (``ray.nodes()``) for a join barrier.

Pure logic: the module runs Ray's own API in the engine's venv and hands the
JSON here.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

# Runs inside the engine's venv as the Ray user: prints ray.nodes() as JSON.
PROBE = (
    "import json, sys, ray\n"
    "ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False)\n"
    "print('RAY_NODES_JSON=' + json.dumps(ray.nodes(), default=str))\n"
)


class RayProbeError(Exception):
    """The probe's output could not be read."""


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
    """Read the probe's stdout; Ray may print its own lines around ours."""
    for line in reversed(text.splitlines()):
        if line.startswith("RAY_NODES_JSON="):
            try:
                raw = json.loads(line[len("RAY_NODES_JSON="):])
            except ValueError as exc:
                raise RayProbeError(f"the Ray probe printed invalid JSON: {exc}") from None
            return parse_nodes(raw)
    raise RayProbeError("the Ray probe printed no node table")


def parse_nodes(raw) -> RayCluster:
    if not isinstance(raw, list):
        raise RayProbeError("ray.nodes() did not return a list")
    nodes = []
    for entry in raw:
        if not isinstance(entry, dict):
            raise RayProbeError(f"ray.nodes() returned a {type(entry).__name__} where a node (a dict) belongs")
        res = entry.get("Resources") or {}
        nodes.append(
            RayNode(
                node_ip=str(entry.get("NodeManagerAddress", "")),
                alive=bool(entry.get("Alive", entry.get("alive", False))),
                gpus=float(res.get("GPU", 0.0)),
                cpus=float(res.get("CPU", 0.0)),
                node_id=str(entry.get("NodeID", "")),
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
