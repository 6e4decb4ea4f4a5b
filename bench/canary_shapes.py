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
    session        the lab's session client's shape: 3 sessions, a 1,536-token context growing by
                   128 tokens a turn, 16-token answers, 1.5 s between turns
    chat-cached    3 sessions back to back, each a fixed ~600-token prefix (prefix-cached) plus a
                   short new turn, 4-token answers (issue 39's agent shape)
    decode-heavy   3 sessions back to back, a short prompt, 200-token answers
    bursts         every 4 s, 4 fresh 256-token prompts at once, 1 token each

With ``--knob HOST`` the run applies the lab's slow-prefill knob (``lab/lab.sh fault slow-prefill``)
after the healthy phases and repeats them slowed, then takes it off. A lab job: never beside
another. It prints one line a phase and, with ``--json``, every sample.

    .venv/bin/python bench/canary_shapes.py --url http://10.200.0.11:8000/v1 \\
        --api-key-file <(echo "$KEY") --knob lab1 --json canary.json
"""
from __future__ import annotations

import argparse
import json
import random
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

from ansible.module_utils.prefill.client import EngineClient, engine_prefill_seconds  # noqa: E402
from ansible.module_utils.prefill.decision import GROUP_SIZE as GROUP  # noqa: E402
from ansible.module_utils.prefill.decision import statistic  # noqa: E402
from ansible.module_utils.prefill.errors import PrefillError  # noqa: E402


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


class Load:
    """One traffic shape: threads that send until stopped; counts answers and errors."""

    def __init__(self, url, api_key, model, shape):
        self.url, self.key, self.model, self.shape = url, api_key, model, shape
        self.stop = threading.Event()
        self.ok = self.failed = 0
        self.threads: list[threading.Thread] = []

    def _send(self, client, prompt, max_tokens, salt=None):
        body = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
        if salt:
            body["cache_salt"] = salt
        try:
            client.json("POST", "/v1/completions", body)
            self.ok += 1
        except (PrefillError, OSError):
            self.failed += 1

    def _session(self, index):
        client = EngineClient(self.url, timeout=60, api_key=self.key)
        rnd = random.Random(index)
        words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
        if self.shape == "chat-cached":
            prefix = " ".join(rnd.choice(words) for _ in range(600))
            while not self.stop.is_set():
                turn = " ".join(rnd.choice(words) for _ in range(rnd.randint(10, 40)))
                self._send(client, prefix + " " + turn, 4)
        elif self.shape == "decode-heavy":
            while not self.stop.is_set():
                self._send(client, " ".join(rnd.choice(words) for _ in range(30)), 200)
        elif self.shape == "session":
            # About 1,500 tokens of context and 128 new a turn (a word of these is about 2.75 tokens).
            context = [rnd.choice(words) for _ in range(540)]
            while not self.stop.is_set():
                context = (context + [rnd.choice(words) for _ in range(46)])[-540:]
                self._send(client, " ".join(context), 16)
                self.stop.wait(1.5)

    def _bursts(self):
        rnd = random.Random(7)
        words = "one two three four five six seven eight nine ten".split()
        while not self.stop.is_set():
            burst = [threading.Thread(target=self._send, daemon=True, args=(
                EngineClient(self.url, timeout=60, api_key=self.key),
                " ".join(rnd.choice(words) for _ in range(256)), 1, secrets.token_hex(8))) for _ in range(4)]
            for thread in burst:
                thread.start()
            for thread in burst:
                thread.join()
            self.stop.wait(4)

    def start(self):
        targets = [self._bursts] if self.shape == "bursts" else [
            (lambda i=i: self._session(i)) for i in range(3)] if self.shape != "idle" else []
        self.threads = [threading.Thread(target=target, daemon=True) for target in targets]
        for thread in self.threads:
            thread.start()

    def end(self):
        self.stop.set()
        for thread in self.threads:
            thread.join(90)


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
            load = Load(opts.url, key, opts.model, shape)
            load.start()
            canary.phase = phase
            time.sleep(opts.phase_s)  # a measurement window, not a wait for a state
            canary.phase = "between"
            load.end()
            row = summary(canary.samples, phase, baseline)
            if shape == "idle" and not slowed and "median_spt" in row:
                baseline = statistic([s["spt"] for s in canary.samples if s.get("phase") == phase])
                row = summary(canary.samples, phase, baseline)
            row.update(load_ok=load.ok, load_failed=load.failed)
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
