#!/usr/bin/env python3
"""The fixed-work prefill canary under traffic shapes other than the lab's session client.

Issue 39's question, measured: does one fixed piece of work, timed engine-side, read a healthy
engine as healthy under any ordinary traffic, and a slow one as slow? (The design:
docs/design/prefill-like-for-like.md.) The engine must run with
``--enable-per-request-metrics`` (``vllm_fleet_prefill_timed``, on by default): each completion
then carries ``metrics.time_to_first_token_ms`` = first token - scheduled, the
canary's own prefill interval with its queue left out.

A canary sample: a 1-token warm-up (discarded), then a fresh prompt of ``--prompt-tokens`` tokens
(a new ``cache_salt``, so nothing of it is cached), ``max_tokens`` 2; its seconds per prompt token.
The statistic is the probe's: the mean of the fastest half of the newest 4 samples. Each phase
runs one traffic shape for ``--phase-s`` seconds while the canary samples every ``--interval-s``:

    idle           no traffic (the baseline's conditions)
    session, chat-cached, decode-heavy, bursts, mix
                   lab/traffic/shapes.py's shapes, sent with the official openai client

With ``--knob HOST`` the run applies the lab's slow-prefill knob (``lab/lab.sh fault slow-prefill``)
after the healthy phases and repeats them slowed, then takes it off. A lab job: never beside
another. It prints one line a phase and, with ``--json``, every sample.

    .venv/bin/python bench/canary_shapes.py --url http://10.200.0.11:8000/v1 \\
        --api-key-file <(echo "$KEY") --knob lab1 --json canary.json
"""
from __future__ import annotations

import argparse
import json
import runpy
import secrets
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
runpy.run_path(str(REPO / "plugins" / "module_utils_path.py"))
sys.path.insert(0, str(REPO / "lab" / "traffic"))

from ansible.module_utils.prefill.client import EngineClient, engine_prefill_seconds  # noqa: E402
from ansible.module_utils.prefill.decision import GROUP_SIZE as GROUP  # noqa: E402
from ansible.module_utils.prefill.decision import statistic  # noqa: E402
from ansible.module_utils.prefill.errors import PrefillError  # noqa: E402
from shapes import Load  # noqa: E402  (lab/traffic/shapes.py: the project's traffic shapes)


class Canary(threading.Thread):
    def __init__(self, url, api_key, model, prompt, prompt_tokens, interval_s):
        super().__init__(daemon=True)
        self.client = EngineClient(url, timeout=60, api_key=api_key)
        self.model, self.prompt, self.tokens, self.interval_s = model, prompt, prompt_tokens, interval_s
        self.samples: list[dict] = []
        self.phase = "start"
        self.stop = threading.Event()

    def one(self) -> dict | None:
        self.client.json("POST", "/v1/completions", {"model": self.model, "prompt": "ping", "max_tokens": 1})
        started = time.monotonic()
        data = self.client.json("POST", "/v1/completions", {
            "model": self.model, "prompt": self.prompt, "max_tokens": 2, "min_tokens": 2, "ignore_eos": True,
            "temperature": 0, "cache_salt": secrets.token_hex(16)})
        client_s = time.monotonic() - started
        metrics = data.get("metrics") or {}
        prefill_s = engine_prefill_seconds(data)
        usage = data.get("usage") or {}
        if prefill_s is None:
            raise PrefillError("the completion carries no metrics.time_to_first_token_ms: start the engine "
                               "with --enable-per-request-metrics (vllm_fleet_prefill_timed)")
        return {"phase": self.phase, "at": time.time(), "prefill_s": prefill_s,
                "spt": prefill_s / usage.get("prompt_tokens", self.tokens),
                "queue_s": (metrics.get("queue_time_ms") or 0) / 1000, "client_s": client_s,
                "itl_s": (metrics.get("mean_itl_ms") or 0) / 1000,
                "cached": (usage.get("prompt_tokens_details") or {}).get("cached_tokens")}

    def run(self):
        while not self.stop.is_set():
            began = time.monotonic()
            try:
                self.samples.append(self.one())
            except (PrefillError, OSError) as exc:
                self.samples.append({"phase": self.phase, "at": time.time(), "error": str(exc)[:200]})
            self.stop.wait(max(0.0, self.interval_s - (time.monotonic() - began)))


def summary(samples: list[dict], phase: str, baseline: float | None) -> dict:
    rows = [s for s in samples if s.get("phase") == phase and "spt" in s]
    errors = sum(1 for s in samples if s.get("phase") == phase and "error" in s)
    stats = [statistic([r["spt"] for r in rows[i - GROUP:i]]) for i in range(GROUP, len(rows) + 1)]
    out = {"phase": phase, "samples": len(rows), "errors": errors}
    if rows:
        out["median_spt"] = statistics.median(r["spt"] for r in rows)
        out["queue_s_max"] = max(r["queue_s"] for r in rows)
    if stats and baseline:
        out["stat_ratio_min"] = min(stats) / baseline
        out["stat_ratio_max"] = max(stats) / baseline
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--api-key-file")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--prompt-tokens", type=int, default=1024)
    parser.add_argument("--interval-s", type=float, default=10.0)
    parser.add_argument("--phase-s", type=float, default=90.0)
    parser.add_argument("--shapes", default="idle,session,chat-cached,decode-heavy,bursts")
    parser.add_argument("--knob", metavar="HOST",
                        help="apply lab/lab.sh fault slow-prefill HOST after the healthy phases")
    parser.add_argument("--knob-shapes", default="idle,chat-cached,decode-heavy")
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args(argv)
    key = Path(opts.api_key_file).read_text().strip() if opts.api_key_file else None

    with EngineClient(opts.url, timeout=60, api_key=key) as client:
        prompt, tokens = client.build_prompt(opts.model, opts.prompt_tokens)
    canary = Canary(opts.url, key, opts.model, prompt, tokens, opts.interval_s)
    canary.start()
    plan = [(shape, False) for shape in opts.shapes.split(",")]
    if opts.knob:
        plan += [(shape, True) for shape in opts.knob_shapes.split(",")]
    knob_on = False
    baseline = None
    results = []
    try:
        for shape, slowed in plan:
            if slowed and not knob_on:
                subprocess.run([str(REPO / "lab" / "lab.sh"), "fault", "slow-prefill", opts.knob], check=True,
                               stdout=subprocess.DEVNULL)
                knob_on = True
            phase = shape + (" +knob" if slowed else "")
            load = Load(opts.url, key, shape, opts.model) if shape != "idle" else None
            if load:
                load.start()
            canary.phase = phase
            time.sleep(opts.phase_s)  # a measurement window, not a wait for a state
            canary.phase = "between"
            if load:
                load.end()
            row = summary(canary.samples, phase, baseline)
            if shape == "idle" and not slowed and "median_spt" in row:
                baseline = statistic([s["spt"] for s in canary.samples if s.get("phase") == phase])
                row = summary(canary.samples, phase, baseline)
            row.update(load_ok=load.ok if load else 0, load_failed=load.failed if load else 0)
            results.append(row)
            print(json.dumps(row), flush=True)
    finally:
        canary.stop.set()
        if knob_on:
            subprocess.run([str(REPO / "lab" / "lab.sh"), "fault", "slow-prefill-off", opts.knob],
                           stdout=subprocess.DEVNULL)
    if opts.json:
        opts.json.write_text(json.dumps({"results": results, "samples": canary.samples}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
