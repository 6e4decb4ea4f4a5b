#!/usr/bin/env python3
"""Record the series the watch rules read, from the lab's own Prometheus, under a fault knob.

The fixtures of the rules' promtool tests (tests/fixtures/watch/, tests/unit/watch/) are
real: each is what the lab's Prometheus (lab3, playbooks/watch.yml) scraped from the
engine, the canary and node-exporter while one scenario ran. Run on a converged lab
(site.yml done, the consumer app installed):

    .venv/bin/python lab/watch/record_series.py healthy-idle healthy-loaded slow-prefill wedge kill-ray-worker host-stop

kv-bound wants the field's small pool first (tests/integration/test_diagnose.py's engine:
``--num-gpu-blocks-override 37 --max-num-batched-tokens 512``, through playbooks/engine.yml).
Scenarios that break the engine leave it broken: re-run site.yml after them. Each
writes tests/fixtures/watch/<scenario>.json: the scenario, the window, the step and
every series (labels and [unix time, value] pairs) as Prometheus returned them.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import time
import urllib.parse
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]
LAB_SH = ROOT / "lab" / "lab.sh"
PROMETHEUS = "http://10.200.0.13:9090"
STEP_S = 5
# Every series a rule reads (roles/fleet_watch/templates/etc/prometheus/vllm-fleet/rules.yml.j2).
SELECTOR = ('{__name__=~"up|probe_success|vllm:(request_prefill_time_seconds_sum|'
            'request_prefill_kv_computed_tokens_sum|iteration_tokens_total_count|num_preemptions_total|'
            'kv_cache_usage_perc|num_requests_waiting|num_requests_waiting_by_reason|num_requests_running)|vllm_fleet_.*"}')
CLIENT = "vllm-fleet-session-client.service"
HEAD_URL = "http://10.200.0.11:8000"


def lab(*args: str) -> None:
    subprocess.run([str(LAB_SH), *args], check=True)


def on_host(host: str, command: str) -> None:
    subprocess.run([str(LAB_SH), "ssh", host, command], check=True)


def query_range(start: float, end: float) -> list:
    q = urllib.parse.urlencode({"query": SELECTOR, "start": start, "end": end, "step": STEP_S})
    with urllib.request.urlopen(f"{PROMETHEUS}/api/v1/query_range?{q}", timeout=30) as r:
        return json.load(r)["data"]["result"]


# name -> (seconds, what to do first, what to undo after, description)
SCENARIOS = {
    "healthy-idle": (150, [], [], "no traffic; the canary only"),
    "healthy-loaded": (180, [("host", "lab3", f"systemctl start {CLIENT}")],
                       [("host", "lab3", f"systemctl stop {CLIENT}")],
                       "the lab's session client: 3 sessions against the engine"),
    "slow-prefill": (240, [("host", "lab3", f"systemctl start {CLIENT}"),
                           ("lab", "fault", "slow-prefill", "lab1", "30")],
                     [("lab", "fault", "slow-prefill-off", "lab1"), ("host", "lab3", f"systemctl stop {CLIENT}")],
                     "the session client, with the head's engine processes held to 30 % of a CPU"),
    "wedge": (180, [("lab", "fault", "wedge", "lab1")], [("lab", "fault", "unwedge", "lab1")],
              "no traffic, the engine core SIGSTOPped (direct mode)"),
    "kill-ray-worker": (150, [("lab", "fault", "kill-ray-worker", "lab2")], [],
                        "the worker's Ray worker processes killed (-9); no traffic"),
    "host-stop": (150, [("lab", "fault", "host-stop", "lab1")], [("lab", "fault", "host-start", "lab1")],
                  "the head host powered off; no traffic"),
    # On the field's small pool (tests/integration/test_diagnose.py's engine: 4,736 tokens, 2.31
    # contexts of 2,048): two sessions run and the third waits, for longer than every for:.
    "kv-bound": (420, [("load", "seed")], [("end-load",)],
                 "the seed's shape: 3 full-context sessions (about 1,800-token fresh prompts, 100-token"
                 " answers) through the openai client on a 2.31-context pool; the third waits"),
}


_LOADS: list = []


def run(step: tuple) -> None:
    if step[0] == "host":
        on_host(step[1], step[2])
    elif step[0] == "load":
        # lab/traffic/shapes.py's shape, sent from here with the official openai client.
        for path in (str(ROOT / "lab" / "traffic"), str(ROOT / "tests" / "integration")):
            if path not in sys.path:
                sys.path.insert(0, path)
        from labtools import engine_key
        from shapes import Load

        _LOADS.append(Load(HEAD_URL, engine_key(), step[1]).start())
    elif step[0] == "end-load":
        while _LOADS:
            load = _LOADS.pop()
            load.end()
            print(f"  the load: {load.ok} answered, {load.failed} failed {load.errors[:3]}", flush=True)
    else:
        lab(*step[1:])


# The rules' longest window: a scenario starts only once the one before it is out of every window.
SETTLE_S = 150


def record(name: str, out: pathlib.Path, settle: float) -> None:
    seconds, before, after, what = SCENARIOS[name]
    time.sleep(settle)
    start = time.time() - 30  # thirty healthy seconds before the knob
    for step in before:
        run(step)
    knob_at = time.time()
    print(f"{name}: {what}; recording {seconds} s", flush=True)
    time.sleep(seconds)
    end = time.time()
    for step in after:
        run(step)
    series = query_range(start, end)
    doc = {"scenario": name, "what": what, "knob_at": round(knob_at, 3), "start": round(start, 3),
           "end": round(end, 3), "step_s": STEP_S, "source": f"the lab's Prometheus ({PROMETHEUS}), {SELECTOR}",
           "series": series}
    path = out / f"{name}.json"
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"{name}: {len(series)} series -> {path}", flush=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenarios", nargs="+", choices=sorted(SCENARIOS))
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "tests" / "fixtures" / "watch")
    parser.add_argument("--settle", type=float, default=SETTLE_S,
                        help="seconds to wait before each scenario, out of the windows of the one before"
                             " (default %(default)s)")
    opts = parser.parse_args(argv)
    opts.out.mkdir(parents=True, exist_ok=True)
    for name in opts.scenarios:
        record(name, opts.out, opts.settle)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
