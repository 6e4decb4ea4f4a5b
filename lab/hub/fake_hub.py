#!/usr/bin/python3
"""The lab's Hugging Face Hub: one model repo, served the way the hub serves it.

Engine hosts download a ``hub:<repo id>`` model with ``hf download REPO
--revision REV --local-dir DIR`` (huggingface_hub 2.4.0). The lab is offline,
so this answers exactly the requests that command makes, for one repo id at
one or more commits, with the headers the client checks:

  GET  /api/models/{repo}/revision/{rev}   repo info: "sha" is the commit a
                                           branch name resolves to (asked only
                                           when the revision is no commit hash)
  GET  /api/models/{repo}/tree/{commit}    the file list (?recursive=True)
  HEAD /{repo}/resolve/{rev}/{path}        X-Repo-Commit, ETag, Content-Length
  GET  /{repo}/resolve/{rev}/{path}        the file; a Range header gets 206
  GET  /api/agent-harnesses                an empty registry (hf asks on every
                                           start, without a token)

With --token, every request must carry ``Authorization: Bearer <token>``:
none gets the hub's 401 for a gated repo, another token its 401 "Invalid
credentials in Authorization header". An unknown revision gets the hub's 404
RevisionNotFound, an unknown repo its 404 RepoNotFound.

--cut-after BYTES cuts the connection once, on the first GET of the largest
file, after that many body bytes: the client resumes it with a Range request.

Each request is one JSON line in --log: method, path, status, the Range
header, whether an Authorization header came (never its value), body bytes.

Standard library only: it runs on an offline Debian host with python3 and
nothing else.

Usage:
  fake_hub.py --model-dir DIR --repo ORG/NAME --revision COMMIT[=DIR] ...
              [--branch NAME=COMMIT] [--token TOKEN | --token-file PATH] [--bind 127.0.0.1]
              [--port 8090] [--log FILE] [--cut-after BYTES]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

from lab_http import serve_until_signal

DEFAULT_BIND = "127.0.0.1"
DEFAULT_PORT = 8090
COMMIT = re.compile(r"[0-9a-f]{40}")
# The hub's repo id: [org/]name of letters, digits, '-', '_', '.'.
REPO_ID = re.compile(r"(?:[A-Za-z0-9][\w.-]{0,95}/)?[A-Za-z0-9][\w.-]{0,95}")
RANGE = re.compile(r"bytes=(\d*)-(\d*)")


def blob_oid(data: bytes) -> str:
    """The git blob id of ``data``: the hub's "oid" and a small file's ETag."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def model_files(folder: Path) -> dict[str, Path]:
    """Every file under ``folder`` by its repo path ('/'-separated), sorted."""
    files = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_file() and not rel.startswith(".cache/") and not rel.startswith(".git/"):
            files[rel] = path
    return files


class Snapshot:
    """One commit of the repo: its files, with their oids computed once."""

    def __init__(self, commit: str, folder: Path) -> None:
        self.commit = commit
        self.folder = folder
        self.files = model_files(folder)
        if "config.json" not in self.files:
            raise ValueError(f"{folder} has no config.json; it is no model folder")
        self.oids = {rel: blob_oid(path.read_bytes()) for rel, path in self.files.items()}
        self.largest = max(self.files, key=lambda rel: (self.files[rel].stat().st_size, rel))

    def tree(self) -> list[dict]:
        return [{"type": "file", "oid": self.oids[rel], "size": path.stat().st_size, "path": rel}
                for rel, path in self.files.items()]


class FakeHub(ThreadingHTTPServer):
    """The server, its one repo and the request log."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], *, repo: str, snapshots: list[Snapshot],
                 branches: dict[str, str] | None = None, token: str = "", log: str | None = None,
                 cut_after: int | None = None) -> None:
        self.repo = repo
        self.snapshots = {s.commit: s for s in snapshots}
        self.branches = dict(branches or {})
        self.branches.setdefault("main", snapshots[0].commit)
        self.token = token
        self.cut_after = cut_after
        self.cut_done = False
        self.log_path = log
        self.records: list[dict] = []
        self._lock = threading.Lock()
        super().__init__(address, HubHandler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def commit_of(self, revision: str) -> str | None:
        if revision in self.snapshots:
            return revision
        return self.branches.get(revision)

    def take_cut(self, snapshot: Snapshot, rel: str, method: str) -> int | None:
        """The byte count to cut this response after, once, on the largest file's first GET."""
        with self._lock:
            if self.cut_after is None or self.cut_done or method != "GET" or rel != snapshot.largest:
                return None
            self.cut_done = True
            return self.cut_after

    def record(self, entry: dict) -> None:
        with self._lock:
            self.records.append(entry)
            if self.log_path:
                with open(self.log_path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(entry) + "\n")

    def handle_error(self, request, client_address):
        pass  # a cut connection leaves a broken pipe behind; that is the point


class HubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FakeHub
    server_version = "fake-hub"

    def log_message(self, format, *args):  # noqa: A002
        pass

    def do_HEAD(self):  # noqa: N802
        self._route("HEAD")

    def do_GET(self):  # noqa: N802
        self._route("GET")

    # --- answers -------------------------------------------------------------------------------

    def _route(self, method: str) -> None:
        self._sent = 0
        self._status = 0
        path = urlsplit(self.path).path
        try:
            if path == "/api/agent-harnesses" and method == "GET":
                # hf's best-effort, anonymous look-up of AI agent harnesses, on every start.
                self._json(200, {"standardEnvVars": [], "harnesses": {}})
                return
            if not self._authorized():
                return
            repo = self.server.repo
            api = f"/api/models/{repo}"
            resolve = f"/{repo}/resolve/"
            if path.startswith(api + "/revision/") and method == "GET":
                self._info(unquote(path[len(api + "/revision/"):]))
            elif path == api and method == "GET":
                self._info("main")
            elif path.startswith(api + "/tree/") and method == "GET":
                self._tree(unquote(path[len(api + "/tree/"):]))
            elif path.startswith(resolve):
                revision, _, rel = path[len(resolve):].partition("/")
                self._file(method, unquote(revision), unquote(rel))
            elif path.startswith("/api/models/") or "/resolve/" in path:
                self._error(404, "RepoNotFound", "Repository not found")
            else:
                self._error(404, None, "Not Found")
        finally:
            self.server.record({"ts": round(time.time(), 3), "method": method, "path": self.path,
                                "status": self._status, "range": self.headers.get("Range"),
                                "authorization": self.headers.get("Authorization") is not None,
                                "bytes": self._sent})

    def _authorized(self) -> bool:
        token = self.server.token
        if not token:
            return True
        given = self.headers.get("Authorization")
        if given is None:
            # As the hub answers an anonymous request for a gated model.
            self._error(401, "GatedRepo", f"Access to model {self.server.repo} is restricted. You must have access"
                                          " to it and be authenticated to access it. Please log in.")
            return False
        if given != f"Bearer {token}":
            self._error(401, None, "Invalid credentials in Authorization header")
            return False
        return True

    def _info(self, revision: str) -> None:
        commit = self.server.commit_of(revision)
        if commit is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            return
        snapshot = self.server.snapshots[commit]
        self._json(200, {"_id": commit[:24], "id": self.server.repo, "modelId": self.server.repo, "sha": commit,
                         "private": bool(self.server.token), "disabled": False, "gated": False,
                         "siblings": [{"rfilename": rel} for rel in snapshot.files]})

    def _tree(self, rest: str) -> None:
        revision, _, sub = rest.partition("/")
        commit = self.server.commit_of(revision)
        if commit is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            return
        entries = self.server.snapshots[commit].tree()
        if sub:
            entries = [e for e in entries if e["path"].startswith(sub.rstrip("/") + "/")]
        self._json(200, entries)

    def _file(self, method: str, revision: str, rel: str) -> None:
        commit = self.server.commit_of(revision)
        if commit is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            return
        snapshot = self.server.snapshots[commit]
        path = snapshot.files.get(rel)
        if path is None:
            self._error(404, "EntryNotFound", f"{rel} does not exist on \"{revision}\"", commit=commit)
            return
        data = path.read_bytes()
        size = len(data)
        start, end, status = 0, size - 1, 200
        wanted = self.headers.get("Range")
        if wanted:
            match = RANGE.fullmatch(wanted.strip())
            first = int(match.group(1)) if match and match.group(1) else None
            last = int(match.group(2)) if match and match.group(2) else None
            if first is None and last is not None:  # bytes=-N: the last N bytes
                first, last = max(size - last, 0), size - 1
            if match is None or first is None or first >= size:
                self._status = 416
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            start, end, status = first, min(last if last is not None else size - 1, size - 1), 206
        body = data[start:end + 1]
        self._status = status
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{snapshot.oids[rel]}"')
        self.send_header("X-Repo-Commit", commit)
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        if method == "HEAD":
            return
        cut = self.server.take_cut(snapshot, rel, method)
        if cut is not None and cut < len(body):
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self._sent = cut
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(body)
        self._sent = len(body)

    def _json(self, status: int, payload) -> None:
        data = json.dumps(payload).encode()
        self._status = status
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
            self._sent = len(data)

    def _error(self, status: int, code: str | None, message: str, commit: str | None = None) -> None:
        """An error as the hub sends it: X-Error-Code and X-Error-Message, which the client reads."""
        data = json.dumps({"error": message}).encode()
        self._status = status
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        if code:
            self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        if commit:
            self.send_header("X-Repo-Commit", commit)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
            self._sent = len(data)


# --- the command line ------------------------------------------------------------------------------

def _revision(text: str, model_dir: str | None) -> tuple[str, Path]:
    commit, _, folder = text.partition("=")
    if not COMMIT.fullmatch(commit):
        raise argparse.ArgumentTypeError(f"--revision {text!r}: a revision is a 40-hex commit hash, [=DIR]")
    if not folder and not model_dir:
        raise argparse.ArgumentTypeError(f"--revision {text!r} has no =DIR and there is no --model-dir")
    return commit, Path(folder or model_dir)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="fake_hub.py",
        description="A Hugging Face Hub stand-in for the vllm-fleet lab: one model repo, for hf download.")
    parser.add_argument("--model-dir", help="the model folder served at each --revision without its own =DIR")
    parser.add_argument("--repo", required=True, help="the repo id, ORG/NAME")
    parser.add_argument("--revision", action="append", required=True, metavar="COMMIT[=DIR]",
                        help="a 40-hex commit served from DIR (default --model-dir); repeatable")
    parser.add_argument("--branch", action="append", default=[], metavar="NAME=COMMIT",
                        help="a branch name resolving to one of the commits (main: the first, unless given)")
    parser.add_argument("--token", default="", help="require Authorization: Bearer TOKEN (default: none)")
    parser.add_argument("--token-file", metavar="PATH",
                        help="the same, the token read from PATH (kept off the command line, ps and the journal)")
    parser.add_argument("--bind", default=DEFAULT_BIND, help="address to bind (default %(default)s)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help="port to bind; 0 picks a free one (default %(default)s)")
    parser.add_argument("--log", help="append one JSON line per request to this file")
    parser.add_argument("--cut-after", type=int, metavar="BYTES",
                        help="cut the first GET of the largest file after BYTES body bytes, once")
    args = parser.parse_args(argv)
    if not REPO_ID.fullmatch(args.repo) or ".." in args.repo or "--" in args.repo:
        parser.error(f"--repo {args.repo!r} is no repo id (ORG/NAME)")
    try:
        args.revisions = [_revision(text, args.model_dir) for text in args.revision]
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    commits = [c for c, _ in args.revisions]
    args.branches = {}
    for text in args.branch:
        name, _, commit = text.partition("=")
        if not name or COMMIT.fullmatch(name) or commit not in commits:
            parser.error(f"--branch {text!r}: NAME=COMMIT, with one of the --revision commits")
        args.branches[name] = commit
    if args.cut_after is not None and args.cut_after < 0:
        parser.error("--cut-after must be >= 0")
    if args.token_file:
        if args.token:
            parser.error("--token and --token-file: give one")
        try:
            with open(args.token_file, encoding="utf-8") as fh:
                args.token = fh.read().strip()
        except OSError as exc:
            parser.error(f"--token-file: {exc}")
        if not args.token:
            parser.error(f"--token-file {args.token_file} is empty")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        snapshots = [Snapshot(commit, folder) for commit, folder in args.revisions]
    except (OSError, ValueError) as exc:
        print(f"fake_hub: {exc}", file=sys.stderr)
        return 2
    try:
        server = FakeHub((args.bind, args.port), repo=args.repo, snapshots=snapshots, branches=args.branches,
                         token=args.token, log=args.log, cut_after=args.cut_after)
    except OSError as exc:
        print(f"fake_hub: cannot listen on {args.bind}:{args.port}: {exc}", file=sys.stderr)
        return 1
    revisions = ", ".join([s.commit for s in snapshots] + [f"{b}={c[:12]}" for b, c in server.branches.items()])
    serve_until_signal(server, f"fake_hub: serving {args.repo} at {server.url} ({revisions})", "fake_hub: stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
