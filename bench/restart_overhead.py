#!/usr/bin/env python3
"""The rolling restart's downtime on the lab, and the toolkit's share of it.

Runs `playbooks/rolling-restart.yml -e restart_policy=always` --runs times
against the lab (each a real whole-engine restart of the TP2 engine, with the
consumers on the lab's fallback) and prints, per run and as medians, the
report's figures: downtime_s, ray_s, engine_boot_s, checks_s, drained_s and
overhead_s (drained_s minus Ray and vLLM's own boot). The target is an
overhead under 5 s (docs/benchmarks.md says whether it is met).

Needs the lab up with a converged engine and the consumer application
(`lab/lab.sh up`, site.yml, lab/playbooks/consumer-app.yml); a lab job:
never run it beside another.

    .venv/bin/python bench/restart_overhead.py --runs 3
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KEYS = ("downtime_s", "ray_s", "engine_boot_s", "checks_s", "drained_s", "overhead_s")


def one_run(report: Path) -> dict:
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0")
    r = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "inventory/lab",
                        "playbooks/rolling-restart.yml",
                        "-e", "restart_policy=always", "-e", f"vllm_restart_report_path={report}"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        sys.exit(f"the rolling restart failed (rc {r.returncode}):\n{r.stdout[-3000:]}")
    (engine,) = [e for e in json.loads(report.read_text())["engines"] if e["outcome"] == "restarted"]
    return {k: engine[k] for k in KEYS} | {"drain": engine["drain"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            rows.append(one_run(Path(tmp) / f"restart-{i}.json"))
            print(json.dumps(rows[-1]), flush=True)
    print("median: " + ", ".join(f"{k} {statistics.median(r[k] for r in rows):.1f}" for k in KEYS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
