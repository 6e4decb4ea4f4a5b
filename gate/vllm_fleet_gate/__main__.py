"""``vllm-fleet-gate --config FILE`` (or ``python -m vllm_fleet_gate``).

Exit status: 0 after a clean stop (SIGTERM or SIGINT) or a good
``--check-config``; 2 for a bad config or command line; 1 when the gate
cannot listen.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable

from aiohttp import web

from . import __version__
from .app import Gate
from .config import Config, ConfigError, load_config
from .logsink import LoopBatchedHandler

ENV_CONFIG = "VLLM_FLEET_GATE_CONFIG"
LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"
log = logging.getLogger("vllm_fleet_gate")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vllm-fleet-gate",
        description="KV-pool-aware admission gate in front of vLLM engines (OpenAI-compatible proxy).",
    )
    p.add_argument("--config", metavar="FILE", default=os.environ.get(ENV_CONFIG),
                   help=f"the JSON config (default: ${ENV_CONFIG})")
    p.add_argument("--check-config", action="store_true", help="validate the config and exit")
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                   help="INFO logs one line per request (default)")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return p


async def serve(config: Config, access_sink: Callable[[str], None] | None = None) -> int:
    """Run until SIGTERM/SIGINT, then stop gracefully. Returns the exit status."""
    gate = Gate(config, access_sink=access_sink)
    # handler_cancellation: a client that disconnects cancels its handler,
    # which is how a queued waiter leaves the queue. The gate's options: the
    # idle timeout (it also bounds trickled headers) and its server logger.
    runner = web.AppRunner(gate.make_app(), handler_cancellation=True, shutdown_timeout=1.0, **gate.server_options())
    await runner.setup()
    site = web.TCPSite(runner, config.listen_host, config.listen_port, backlog=1024, reuse_address=True)
    try:
        await site.start()
    except OSError as exc:
        log.error("cannot listen on %s:%d: %s", config.listen_host, config.listen_port, exc.strerror or exc)
        await runner.cleanup()
        return 1
    log.info(
        "listening on %s:%d; upstreams: %s; token count: %s",
        config.listen_host, config.listen_port,
        ", ".join(f"{u.name}={u.url} ({u.kv_cache_tokens} KV tokens)" for u in config.upstreams),
        config.token_count_mode,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()

    # Keep listening while in-flight requests finish, so a new request gets a
    # clear 503 with Retry-After rather than a refused connection.
    gate.begin_shutdown()
    if await gate.wait_idle(config.shutdown_timeout_s):
        log.info("all requests finished; exiting")
    else:
        log.warning(
            "shutdown_timeout_s (%g s) passed with %d requests in flight; cutting them",
            config.shutdown_timeout_s, gate.admission.inflight,
        )
    await runner.cleanup()
    return 0


def loop_factory():
    """uvloop's event loop when it is installed (it is in the gate's
    dependencies), else asyncio's own."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not args.config:
        _parser().error(f"--config FILE is required (or set {ENV_CONFIG})")
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        lines = "\n".join(f"  - {e}" for e in exc.errors)
        print(f"vllm-fleet-gate: invalid config {args.config}:\n{lines}", file=sys.stderr)
        return 2
    if args.check_config:
        print(
            f"{args.config}: OK: listen {config.listen_host}:{config.listen_port}, "
            f"{len(config.upstreams)} upstream(s): {', '.join(u.name for u in config.upstreams)}"
        )
        return 0
    # journald stamps the time; one line per record. The access log writes a
    # record per request, so skip what the format never shows (the logging
    # HOWTO's "Optimization" section): the caller's frame, thread, process.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    # One write per event-loop turn rather than per line (logsink.py); the
    # access lines skip the LogRecord and go straight into that batch, in the
    # same format.
    handler = LoopBatchedHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    logging.basicConfig(level=args.log_level, handlers=[handler])
    access_prefix = LOG_FORMAT % {"levelname": "INFO", "name": "vllm_fleet_gate.access", "message": ""}

    def access_sink(line: str) -> None:
        handler.write_line(f"{access_prefix}{line}\n")

    try:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            return runner.run(serve(config, access_sink=access_sink))
    except KeyboardInterrupt:  # pragma: no cover - a second Ctrl-C
        return 130


if __name__ == "__main__":
    sys.exit(main())
