#!/usr/bin/env python3
"""How long an idempotent `site.yml` rerun takes on the lab, and where it goes.

Runs site.yml once to converge (not timed), then --reps reruns with
ansible.posix's profile_tasks callback, and prints the median wall time, the
changed count of each rerun (must be 0), how often `vllm serve --help=all`
ran (the flag table's cache hits), and the slowest tasks of the last rerun.

Needs the lab up (`make lab-up`); a lab job: never run it beside another.

    .venv/bin/python bench/site_rerun.py --reps 3
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PLAYBOOK = str(REPO / ".venv" / "bin" / "ansible-playbook")


def run_site(profile: bool, extra: list[str] | None = None) -> tuple[float, str]:
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    if profile:
        env["ANSIBLE_CALLBACKS_ENABLED"] = "ansible.posix.profile_tasks"
        env["PROFILE_TASKS_TASK_OUTPUT_LIMIT"] = "15"
    start = time.monotonic()
    r = subprocess.run([PLAYBOOK, "-v", "-i", "inventory/lab", "site.yml", *(extra or [])], cwd=REPO, env=env,
                       capture_output=True, text=True)
    took = time.monotonic() - start
    if r.returncode != 0:
        sys.exit(f"site.yml failed (rc={r.returncode}):\n{r.stdout[-3000:]}")
    return took, r.stdout


def changed(out: str) -> int:
    return sum(int(n) for n in re.findall(r"changed=(\d+)", out.split("PLAY RECAP")[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--compare", action="store_true",
                    help="alternate with reruns that read the flag table fresh (an empty cache directory each)")
    args = ap.parse_args()
    run_site(profile=False)
    times, outs, fresh = [], [], []
    for rep in range(args.reps):
        if args.compare:
            took, out = run_site(profile=False,
                                 extra=["-e", f"vllm_fleet_help_cache=/tmp/vllm-help-bench-{os.getpid()}-{rep}"])
            fresh.append(took)
            print(f"rerun, flag table read fresh: {took:6.1f} s, changed={changed(out)}", flush=True)
        took, out = run_site(profile=True)
        times.append(took)
        outs.append(out)
        hits = len(re.findall(r"help_cached\W*\s*true", out))
        misses = len(re.findall(r"help_cached\W*\s*false", out))
        print(f"rerun: {took:6.1f} s, changed={changed(out)}, flag table from cache: {hits}, read fresh: {misses}",
              flush=True)
    print(f"median of {args.reps}: {statistics.median(times):.1f} s (runs: {', '.join(f'{t:.1f}' for t in times)})")
    if fresh:
        print(f"read fresh, median of {args.reps}: {statistics.median(fresh):.1f} s "
              f"(runs: {', '.join(f'{t:.1f}' for t in fresh)}); cached/fresh = "
              f"{statistics.median(times) / statistics.median(fresh):.2f}")
    recap = outs[-1].split("TASKS RECAP")[-1].splitlines()[3:18]
    print("slowest tasks of the last rerun:")
    print("\n".join(recap))


if __name__ == "__main__":
    main()
