#!/usr/bin/python3
"""The lab's stand-in for the field's application: long chat sessions with a fallback.

It keeps N chat sessions going at once. Before every request it rereads the
endpoint file that the toolkit writes on consumer hosts, so a cutover between
gate mode and direct mode takes effect at the next request. When the model
endpoint fails (connection error, timeout, HTTP 5xx or 429, a broken stream),
it sends the same request to the fallback model, as the field's application
did. Each request's outcome is one JSON line in the log; the summary mode
turns that log into counts and the length of the longest outage.

Standard library only: it runs on an offline Debian host with python3 and
nothing else. Its parts lie beside it (session_*.py); see README.md there
for the options and formats.

Usage:
  session_client.py [--endpoint-file F] [--fallback-url URL] [--sessions N]
                    [--context-tokens N] [--prompt-tokens N] [--max-tokens N]
                    [--stream] [--timeout S] [--think-ms MS] [--duration S]
                    [--max-requests N] [--model NAME] [--log FILE] [--quiet]
  session_client.py --summary FILE [--since TS] [--until TS]
  session_client.py summarise FILE [--since TS] [--until TS]
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from datetime import datetime

from session_log import JsonlLog, short_error
from session_runner import Client
from session_summary import load_records, parse_ts, summarise

DEFAULT_ENDPOINT_FILE = "/etc/vllm-fleet/endpoint.env"
DEFAULT_LOG = "/var/log/vllm-fleet/session-client.jsonl"
# fallback_server.py's default address.
DEFAULT_FALLBACK_URL = "http://127.0.0.1:8001/v1"


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _timestamp(text: str) -> datetime:
    ts = parse_ts(text)
    if ts is None:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 timestamp: {text}")
    return ts


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="session_client.py",
        description="Long chat sessions against the endpoint in the vllm-fleet endpoint file, "
                    "with a fallback model; one JSON line per request.",
        epilog="summarise FILE is the same as --summary FILE.")
    run = parser.add_argument_group("sessions")
    run.add_argument("--endpoint-file", default=DEFAULT_ENDPOINT_FILE,
                     help="KEY=VALUE file reread before every request (default %(default)s)")
    run.add_argument("--fallback-url", default=DEFAULT_FALLBACK_URL,
                     help="OpenAI base URL of the fallback model; '' for none (default %(default)s)")
    run.add_argument("--sessions", type=_positive_int, default=3, help="concurrent sessions (default %(default)s)")
    run.add_argument("--context-tokens", type=_positive_int, default=1536,
                     help="context budget per request, prompt plus answer, at 4 chars/token (default %(default)s)")
    run.add_argument("--prompt-tokens", type=_positive_int, default=128,
                     help="size of each new user message (default %(default)s)")
    run.add_argument("--max-tokens", type=_positive_int, default=32, help="max_tokens per answer (default %(default)s)")
    run.add_argument("--model", default=None, help="model to ask for when the endpoint file has no OPENAI_MODEL")
    run.add_argument("--stream", action="store_true", help="ask for SSE streams and read each to [DONE]")
    run.add_argument("--timeout", type=_non_negative_float, default=30.0,
                     help="seconds per request, connect to last byte (default %(default)s)")
    run.add_argument("--think-ms", type=_non_negative_float, default=200.0,
                     help="pause between a session's turns (default %(default)s)")
    run.add_argument("--duration", type=_non_negative_float, default=None,
                     help="start no request after this many seconds; in-flight ones finish (default: no limit)")
    run.add_argument("--max-requests", type=_positive_int, default=None,
                     help="stop after this many requests in all sessions (default: no limit)")
    run.add_argument("--log", default=DEFAULT_LOG, help="JSONL log, appended; '-' for stdout (default %(default)s)")
    run.add_argument("--quiet", action="store_true", help="no start and end lines on stderr")
    summary = parser.add_argument_group("summary")
    summary.add_argument("--summary", metavar="FILE", help="print FILE's summary as JSON and exit")
    summary.add_argument("--since", type=_timestamp, help="summarise only requests started at or after this time")
    summary.add_argument("--until", type=_timestamp, help="summarise only requests started at or before this time")
    return parser


def parse_args(argv: list[str]) -> argparse.Namespace:
    if argv[:1] in (["summarise"], ["summarize"]):
        if len(argv) < 2 or argv[1].startswith("-"):
            build_parser().error("summarise needs a FILE")
        argv = ["--summary", *argv[1:]]
    parser = build_parser()
    opts = parser.parse_args(argv)
    if opts.summary is None:
        if opts.max_tokens >= opts.context_tokens:
            parser.error("--max-tokens must be smaller than --context-tokens")
        if opts.timeout <= 0:
            parser.error("--timeout must be > 0")
    return opts


def _summary_command(opts: argparse.Namespace) -> int:
    try:
        records, bad = load_records(opts.summary)
    except OSError as exc:
        print(f"session_client: cannot read {opts.summary}: {short_error(exc)}", file=sys.stderr)
        return 2
    result = {"file": opts.summary, "bad_lines": bad, **summarise(records, opts.since, opts.until)}
    print(json.dumps(result, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(list(sys.argv[1:] if argv is None else argv))
    if opts.summary is not None:
        return _summary_command(opts)
    try:
        log = JsonlLog(opts.log)
    except OSError as exc:
        print(f"session_client: cannot open log {opts.log}: {short_error(exc)}", file=sys.stderr)
        return 1
    client = Client(opts, log)
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, lambda *_: client.abort())
    if not opts.quiet:
        print(f"session_client: {opts.sessions} sessions, endpoint file {opts.endpoint_file}, "
              f"fallback {opts.fallback_url or 'none'}, log {opts.log}", file=sys.stderr, flush=True)
    try:
        counts = client.run()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        log.close()
    if not opts.quiet:
        why = "stopped by signal" if client.stop.is_set() else "done"
        print(f"session_client: {why}: " + ", ".join(f"{k} {v}" for k, v in counts.items()),
              file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
