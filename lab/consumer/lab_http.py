"""What the lab's small HTTP servers share: JSON answers, chunked writes, serving until a signal.

Standard library only. It lies beside each program that imports it, on the lab hosts as here:
fallback_server.py (lab/consumer) and fake_hub.py (lab/hub, whose copy is a link to this file).
"""
from __future__ import annotations

import json
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer


def send_json(handler: BaseHTTPRequestHandler, status: int, payload: object) -> None:
    """Answer ``payload`` as a JSON body with its Content-Length."""
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def write_chunk(handler: BaseHTTPRequestHandler, data: bytes) -> None:
    """One chunk of a Transfer-Encoding: chunked body, sent at once; b"" ends the body."""
    handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
    handler.wfile.flush()


def serve_until_signal(server: HTTPServer, started: str, stopped: str) -> None:
    """Serve until SIGTERM or SIGINT, saying ``started`` and ``stopped`` on stderr."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    # serve_forever runs in a thread: shutdown() from the main thread's
    # signal path would otherwise wait on itself.
    thread = threading.Thread(target=server.serve_forever, name="serve", daemon=True)
    thread.start()
    print(started, file=sys.stderr, flush=True)
    stop.wait()
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)
    print(stopped, file=sys.stderr, flush=True)
