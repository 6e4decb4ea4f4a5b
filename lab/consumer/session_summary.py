"""The session client's summary: a log turned into counts and the longest run of fallbacks.

Part of session_client.py (standard library only; it lies beside it on the lab hosts).
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime

from session_log import OUTCOMES


def parse_ts(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        ts = datetime.fromisoformat(value)
    except ValueError:
        return None
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


def load_records(path: str) -> tuple[list[dict], int]:
    """The log's records, and how many lines were not records."""
    records, bad = [], 0
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                bad += 1
                continue
            if (not isinstance(record, dict) or record.get("outcome") not in OUTCOMES
                    or parse_ts(record.get("ts")) is None):
                bad += 1
                continue
            records.append(record)
    return records, bad


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summarise(records: Iterable[dict], since: datetime | None = None, until: datetime | None = None) -> dict:
    """Counts per outcome, mode and base URL, and the runs of consecutive fallbacks.

    Records are put in time order (ts is when a request started). A run is a
    maximal sequence of ``fallback`` records with no other outcome between
    them, across all sessions. Its length in seconds runs from its first
    request's start to its last request's end (ts + latency_ms): the outage
    as the application saw it.
    """
    rows = []
    for record in records:
        ts = parse_ts(record.get("ts"))
        if ts is None or (since and ts < since) or (until and ts > until):
            continue
        session, turn = record.get("session"), record.get("turn")
        rows.append((ts, session if isinstance(session, int) else 0, turn if isinstance(turn, int) else 0, record))
    rows.sort(key=lambda row: row[:3])

    def zero() -> dict[str, int]:
        return {outcome: 0 for outcome in OUTCOMES}

    outcomes, by_mode, by_url = zero(), {}, {}
    latencies: dict[str, list[float]] = {outcome: [] for outcome in OUTCOMES}
    runs: list[dict] = []
    current: dict | None = None
    for ts, _, _, record in rows:
        outcome = record["outcome"]
        outcomes[outcome] += 1
        by_mode.setdefault(record.get("mode") or "unknown", zero())[outcome] += 1
        by_url.setdefault(record.get("base_url") or "unknown", zero())[outcome] += 1
        latency = record.get("latency_ms")
        latency = float(latency) if isinstance(latency, (int, float)) else 0.0
        latencies[outcome].append(latency)
        if outcome != "fallback":
            current = None
            continue
        end = ts.timestamp() + latency / 1000.0
        if current is None:
            current = {"requests": 0, "start": ts, "start_s": ts.timestamp(), "end_s": end, "last": ts}
            runs.append(current)
        current["requests"] += 1
        current["end_s"] = max(current["end_s"], end)
        current["last"] = ts

    fallbacks = [row[0] for row in rows if row[3]["outcome"] == "fallback"]
    errors = [row[0] for row in rows if row[3]["outcome"] == "error"]
    longest = None
    if runs:
        best = max(runs, key=lambda run: (run["end_s"] - run["start_s"], run["requests"]))
        longest = {
            "requests": best["requests"],
            "seconds": round(best["end_s"] - best["start_s"], 3),
            "start": best["start"].isoformat(timespec="milliseconds"),
            "last_start": best["last"].isoformat(timespec="milliseconds"),
        }
    iso = lambda ts: ts.isoformat(timespec="milliseconds") if ts else None  # noqa: E731
    return {
        "records": len(rows),
        "first_ts": iso(rows[0][0]) if rows else None,
        "last_ts": iso(rows[-1][0]) if rows else None,
        "outcomes": outcomes,
        "by_mode": by_mode,
        "by_base_url": by_url,
        "first_fallback_ts": iso(fallbacks[0]) if fallbacks else None,
        "last_fallback_ts": iso(fallbacks[-1]) if fallbacks else None,
        "first_error_ts": iso(errors[0]) if errors else None,
        "last_error_ts": iso(errors[-1]) if errors else None,
        "fallback_runs": len(runs),
        "longest_fallback_run": longest,
        "longest_fallback_run_s": longest["seconds"] if longest else 0.0,
        "latency_ms": {
            outcome: {"p50": _percentile(v, 0.5), "p95": _percentile(v, 0.95), "max": max(v)}
            for outcome, v in latencies.items() if v
        },
    }
