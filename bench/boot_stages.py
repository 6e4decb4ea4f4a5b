#!/usr/bin/env python3
"""Each engine boot's stages, read from the head's journal.

A boot of the lab's engine (vLLM, Ray backend) is three Python programs in a
row: the API server (``vllm serve``) imports vLLM, starts the engine core,
which connects to Ray and has Ray start one worker actor per TP rank; then the
engine initialises (model, KV pool) and the API server answers. Per start of
``vllm.service`` this prints the seconds of each stage, from the journal's own
timestamps (``journalctl -o short-iso-precise``):

    api_import   unit started -> the API server's first line (vLLM imported)
    config       -> "Resolved architecture" (the model's config; a new install
                 inspects the model class in a subprocess once, then caches it)
    engine_core  -> the engine core's first line (spawned, it imports vLLM again;
                 forked, it starts at once)
    ray_workers  -> a Ray worker's first line (actor process started, vLLM imported)
    init         -> the engine core's "init engine ... took" line
    serving      -> the API server's "Application startup complete"
    total        unit started -> serving

    .venv/bin/python bench/boot_stages.py --lab lab1          # the running lab's head
    .venv/bin/python bench/boot_stages.py journal.txt ...     # saved journals

The saved form is ``journalctl -o short-iso-precise -u vllm.service`` (or
short-precise, within one year). A lab
job: never run --lab beside another.
"""
from __future__ import annotations

import argparse
import datetime as dt
import re
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STAGES = ("api_import", "config", "engine_core", "ray_workers", "init", "serving")
_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)[+-]\d{2}:?\d{2} \S+ ([^:]+): (.*)$")
# short-precise (no year): "Dec 04 11:08:03.123456 lab1 vllm[469]: ..."
_SHORT = re.compile(r"^([A-Z][a-z]{2} \d\d \d\d:\d\d:\d\d\.\d+) \S+ ([^:]+): (.*)$")


def _parse(line: str):
    if m := _LINE.match(line):
        return dt.datetime.fromisoformat(m.group(1)).timestamp(), m.group(2), m.group(3)
    if m := _SHORT.match(line):
        when = dt.datetime.strptime(f"2000 {m.group(1)}", "%Y %b %d %H:%M:%S.%f").timestamp()
        return when, m.group(2), m.group(3)
    return None
# What marks the end of each stage, in the order they come.
_MARKS = (
    ("api_import", re.compile(r"\(APIServer pid=\d+\) ")),
    ("config", re.compile(r"\(APIServer pid=\d+\) .*Resolved architecture")),
    ("engine_core", re.compile(r"\(EngineCore(?:_DP\d+)? pid=\d+\) ")),
    ("ray_workers", re.compile(r"\(RayWorkerProc pid=\d+")),
    ("init", re.compile(r"init engine .* took ")),
    ("serving", re.compile(r"Application startup complete")),
)


def boots(lines) -> list[dict]:
    """One dict per start of the unit: each stage's seconds, and the total."""
    out, start, seen, last = [], None, {}, None
    for line in lines:
        parsed = _parse(line.rstrip("\n"))
        if not parsed:
            continue
        when, ident, text = parsed
        if ident.startswith("systemd") and re.match(r"Started vllm\.service", text):
            start, seen, last = when, {}, when
            continue
        if start is None:
            continue
        for stage, pattern in _MARKS:
            if stage not in seen and pattern.search(text):
                seen[stage] = round(when - last, 1)
                last = when
                if stage == "serving":
                    seen["total"] = round(when - start, 1)
                    out.append(seen)
                    start = None
                break
            if stage not in seen:
                break  # the stages come in order: wait for this one first
    return out


def journal(host: str) -> list[str]:
    r = subprocess.run([str(REPO / "lab" / "lab.sh"), "ssh", host, "journalctl", "-o", "short-iso-precise",
                        "--no-pager", "-u", "vllm.service"], capture_output=True, text=True, timeout=120)
    return r.stdout.splitlines()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--lab", metavar="HOST", help="read the journal of this lab host")
    args = ap.parse_args()
    lines = journal(args.lab) if args.lab else [x for f in args.files for x in f.read_text().splitlines()]
    rows = boots(lines)
    if not rows:
        print("no complete boot in the journal")
        return 1
    cols = (*STAGES, "total")
    print("boot  " + "  ".join(f"{c:>11}" for c in cols))
    for i, row in enumerate(rows, 1):
        print(f"{i:>4}  " + "  ".join(f"{row.get(c, float('nan')):>11.1f}" for c in cols))
    print("median" + "  ".join(f"{statistics.median(r[c] for r in rows if c in r):>11.1f}" for c in cols))
    return 0


if __name__ == "__main__":
    sys.exit(main())
