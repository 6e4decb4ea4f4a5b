"""Tests for lab/consumer/session_client.py and its parts (session_*.py) against real loopback servers.

The primary is a stub engine (tests/unit/lab/conftest.py) that can be made
healthy, slow, failing or stream-breaking; the fallback is the real
fallback_server. Each test is bounded to a few seconds.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import session_client as sc
from session_conversation import estimate_tokens, trim_messages
from session_endpoint import Endpoint, EndpointError, parse_env, public_url, read_endpoint
from session_http import post_chat
from session_log import JsonlLog
from session_runner import Client
from session_summary import summarise

SCRIPT = Path(sc.__file__)
API_KEY = "sk-lab-0123456789abcdef-secret"


def client_args(endpoint_file, log: Path, *extra: str, fallback: str | None = None) -> list[str]:
    args = ["--endpoint-file", str(endpoint_file.path), "--log", str(log), "--quiet",
            "--think-ms", "5", "--timeout", "2"]
    if fallback is not None:
        args += ["--fallback-url", fallback]
    return args + list(extra)


def read_log(log: Path) -> list[dict]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def run(endpoint_file, log: Path, *extra: str, fallback: str | None = None) -> list[dict]:
    assert sc.main(client_args(endpoint_file, log, *extra, fallback=fallback)) == 0
    return read_log(log)


# -- the endpoint file ----------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("OPENAI_BASE_URL=http://10.200.0.11:8000/v1\nVLLM_FLEET_MODE=direct\n",
     {"OPENAI_BASE_URL": "http://10.200.0.11:8000/v1", "VLLM_FLEET_MODE": "direct"}),
    # The role's template starts with ansible_managed as a comment.
    ("#\n# Ansible managed\n#\nVLLM_FLEET_MODE=gate\n", {"VLLM_FLEET_MODE": "gate"}),
    ("export OPENAI_MODEL=tiny\r\n\r\n", {"OPENAI_MODEL": "tiny"}),
    ("OPENAI_API_KEY=\"sk-a=b\"\nX='y'\n", {"OPENAI_API_KEY": "sk-a=b", "X": "y"}),
    ("  KEY = spaced  \nnot a pair\n=novalue\n", {"KEY": "spaced"}),
    ("EMPTY=\n", {"EMPTY": ""}),
])
def test_parse_env(text, expected):
    assert parse_env(text) == expected


def test_read_endpoint(tmp_path):
    path = tmp_path / "endpoint.env"
    path.write_text("VLLM_FLEET_MODE=gate\nOPENAI_BASE_URL=http://10.200.0.13:8080/v1/\n"
                    f"OPENAI_MODEL=tiny\nOPENAI_API_KEY={API_KEY}\n")
    endpoint = read_endpoint(str(path))
    assert endpoint == Endpoint("http://10.200.0.13:8080/v1", "gate", "tiny", API_KEY)
    assert API_KEY not in repr(endpoint)


@pytest.mark.parametrize(("content", "message"), [
    (None, "is missing"),
    ("VLLM_FLEET_MODE=direct\n", "has no OPENAI_BASE_URL"),
    ("OPENAI_BASE_URL=10.200.0.11:8000\n", "is not an http(s) URL"),
])
def test_read_endpoint_unusable(tmp_path, content, message):
    path = tmp_path / "endpoint.env"
    if content is not None:
        path.write_text(content)
    with pytest.raises(EndpointError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_endpoint(str(path))


def test_public_url_drops_credentials():
    assert public_url("http://user:pw@10.0.0.1:8000/v1") == "http://10.0.0.1:8000/v1"
    assert public_url("http://10.0.0.1:8000/v1") == "http://10.0.0.1:8000/v1"


# -- trimming -------------------------------------------------------------


def _msg(role: str, chars: int) -> dict:
    return {"role": role, "content": "x" * chars}


SYS = _msg("system", 36)  # 9 + 4 = 13 tokens


@pytest.mark.parametrize(("messages", "budget", "kept"), [
    # Fits: untouched.
    ([SYS, _msg("user", 40)], 100, [0, 1]),
    # 13 + 3 * 14 = 55 > 40: drop the oldest user and its answer.
    ([SYS, _msg("user", 40), _msg("assistant", 40), _msg("user", 40)], 40, [0, 3]),
    # Even over budget, the system message and the newest message stay.
    ([SYS, _msg("user", 400)], 10, [0, 1]),
    # No system message: the history still starts at a user message.
    ([_msg("user", 40), _msg("assistant", 40), _msg("user", 40), _msg("assistant", 40), _msg("user", 40)],
     30, [4]),
    ([_msg("user", 40), _msg("assistant", 40), _msg("user", 40), _msg("assistant", 40), _msg("user", 40)],
     45, [2, 3, 4]),
])
def test_trim_messages(messages, budget, kept):
    assert trim_messages(messages, budget) == [messages[i] for i in kept]


def test_estimate_tokens_is_four_chars_a_token_plus_overhead():
    assert estimate_tokens([_msg("user", 8), _msg("assistant", 9)]) == (2 + 4) + (3 + 4)


# -- requests against the primary -----------------------------------------


def test_ok_with_the_primary(make_engine, fallback, endpoint_file, tmp_path):
    engine = make_engine("primary")
    endpoint_file.write(VLLM_FLEET_MODE="direct", OPENAI_BASE_URL=engine.url, OPENAI_MODEL="tiny")
    records = run(endpoint_file, tmp_path / "log.jsonl", "--sessions", "3", "--max-requests", "9",
                  fallback=fallback.url)
    assert len(records) == 9 == len(engine.requests)
    assert {r["outcome"] for r in records} == {"ok"}
    assert {r["session"] for r in records} == {1, 2, 3}
    assert {(r["mode"], r["base_url"], r["status"], r["error"]) for r in records} == {
        ("direct", engine.url, 200, None)}
    assert set(records[0]) == {"ts", "session", "turn", "mode", "base_url", "outcome", "status",
                               "latency_ms", "error"}
    for session in (1, 2, 3):
        turns = sorted(r["turn"] for r in records if r["session"] == session)
        assert turns == list(range(1, len(turns) + 1))
    request = engine.requests[0]
    assert request["path"] == "/v1/chat/completions"
    assert request["body"]["model"] == "tiny"
    assert request["body"]["max_tokens"] == 32
    assert "stream" not in request["body"]
    assert fallback.requests == {}


def test_history_accumulates_within_the_context_budget(make_engine, endpoint_file, tmp_path):
    engine = make_engine()
    endpoint_file.write(OPENAI_BASE_URL=engine.url)
    run(endpoint_file, tmp_path / "log.jsonl", "--sessions", "1", "--max-requests", "12",
        "--context-tokens", "300", "--prompt-tokens", "60", "--max-tokens", "20")
    sent = [r["body"]["messages"] for r in engine.requests]
    # Turn n carries the system message, the earlier turns and the new question...
    assert [len(m) for m in sent[:3]] == [2, 4, 6]
    assert sent[1][2] == {"role": "assistant", "content": engine.answer}
    # ...until the budget (300 - 20 answer tokens) forces the oldest turns out.
    assert all(estimate_tokens(m) <= 280 for m in sent)
    assert len(sent[-1]) < 2 * 12
    for messages in sent:
        assert messages[0]["role"] == "system"
        assert [m["role"] for m in messages[1:]] == ["user", "assistant"] * (len(messages) // 2 - 1) + ["user"]
    # No model in the file and no --model: the server's default model answers.
    assert "model" not in engine.requests[0]["body"]


def test_endpoint_file_is_reread_before_every_request(make_engine, fallback, endpoint_file, tmp_path):
    a, b = make_engine("a"), make_engine("b")
    endpoint_file.write(VLLM_FLEET_MODE="direct", OPENAI_BASE_URL=a.url)
    log = tmp_path / "log.jsonl"
    opts = sc.parse_args(client_args(endpoint_file, log, "--sessions", "3", "--think-ms", "20",
                                     "--duration", "10", fallback=fallback.url))
    jsonl = JsonlLog(str(log))
    client = Client(opts, jsonl)
    thread = threading.Thread(target=client.run)
    thread.start()
    try:
        a.wait_requests(6)
        endpoint_file.write(VLLM_FLEET_MODE="gate", OPENAI_BASE_URL=b.url)
        # Taken once the new file is in place: a request stamped between a moment taken before
        # the write and the rename still read the old file (CI saw one).
        switched = datetime.now(UTC)
        b.wait_requests(6)
    finally:
        client.drain()
        thread.join(5)
        jsonl.close()
    assert not thread.is_alive()
    records = read_log(log)
    assert {r["outcome"] for r in records} == {"ok"}
    by_url = {url: [r for r in records if r["base_url"] == url] for url in (a.url, b.url)}
    assert len(by_url[a.url]) == len(a.requests) and len(by_url[b.url]) == len(b.requests)
    assert {r["mode"] for r in by_url[a.url]} == {"direct"}
    assert {r["mode"] for r in by_url[b.url]} == {"gate"}
    # ts is taken before the file is read: anything stamped after the rename went to b.
    assert all(r["base_url"] == b.url for r in records if datetime.fromisoformat(r["ts"]) > switched)
    # Every session moved, at its next request, and never went back.
    for session in (1, 2, 3):
        urls = [r["base_url"] for r in sorted(records, key=lambda r: r["turn"]) if r["session"] == session]
        assert urls == sorted(urls, key=lambda url: url == b.url)
        assert urls[0] == a.url and urls[-1] == b.url


# -- failures and the fallback --------------------------------------------


@pytest.mark.parametrize(("behaviour", "status", "stream", "error"), [
    ("status", 503, False, "HTTP 503 StubError"),
    ("status", 500, False, "HTTP 500 StubError"),
    ("status", 429, False, "HTTP 429 StubError"),
    ("slow", None, False, "timeout after 0.3s"),
    ("drop", None, False, "connection closed without a response"),
    ("bad_json", None, False, "answer is not JSON"),
    ("break", None, True, "stream ended before [DONE]"),
    ("slow", None, True, "timeout after 0.3s"),
])
def test_primary_failure_falls_back(make_engine, fallback, endpoint_file, tmp_path, behaviour, status, stream,
                                    error):
    engine = make_engine()
    engine.behaviour, engine.delay_s = behaviour, 1.0
    if status:
        engine.status_code = status
    endpoint_file.write(VLLM_FLEET_MODE="gate", OPENAI_BASE_URL=engine.url)
    extra = ["--sessions", "1", "--max-requests", "2", "--timeout", "0.3"] + (["--stream"] if stream else [])
    records = run(endpoint_file, tmp_path / "log.jsonl", *extra, fallback=fallback.url)
    assert [(r["outcome"], r["status"], r["mode"], r["base_url"]) for r in records] == [
        ("fallback", 200, "gate", engine.url)] * 2
    assert {r["error"] for r in records} == {error}
    assert fallback.requests == {"/v1/chat/completions": 2}
    # The fallback's answer joins the history like any other.
    assert engine.requests[1]["body"]["messages"][2] == {"role": "assistant", "content": fallback.text}


def test_refused_primary_falls_back(fallback, endpoint_file, dead_url, tmp_path):
    endpoint_file.write(VLLM_FLEET_MODE="gate", OPENAI_BASE_URL=dead_url)
    records = run(endpoint_file, tmp_path / "log.jsonl", "--sessions", "2", "--max-requests", "4",
                  fallback=fallback.url)
    assert [(r["outcome"], r["status"], r["error"]) for r in records] == [
        ("fallback", 200, "connection refused")] * 4


def test_missing_endpoint_file_falls_back(fallback, endpoint_file, tmp_path):
    records = run(endpoint_file, tmp_path / "log.jsonl", "--sessions", "1", "--max-requests", "1",
                  fallback=fallback.url)
    assert [(r["outcome"], r["mode"], r["base_url"]) for r in records] == [("fallback", None, None)]
    assert records[0]["error"] == f"endpoint file {endpoint_file.path} is missing"


def test_both_down_is_an_error(endpoint_file, dead_url, tmp_path):
    endpoint_file.write(VLLM_FLEET_MODE="direct", OPENAI_BASE_URL=dead_url)
    records = run(endpoint_file, tmp_path / "log.jsonl", "--sessions", "1", "--max-requests", "2",
                  fallback=dead_url)
    assert [(r["outcome"], r["status"], r["error"]) for r in records] == [
        ("error", None, "connection refused; fallback: connection refused")] * 2


def test_failing_primary_and_failing_fallback(make_engine, endpoint_file, tmp_path):
    primary, backup = make_engine("primary"), make_engine("backup")
    primary.behaviour = backup.behaviour = "status"
    endpoint_file.write(OPENAI_BASE_URL=primary.url)
    records = run(endpoint_file, tmp_path / "log.jsonl", "--sessions", "1", "--max-requests", "3",
                  fallback=backup.url)
    assert [(r["outcome"], r["status"]) for r in records] == [("error", 503)] * 3
    assert records[0]["error"] == "HTTP 503 StubError; fallback: HTTP 503 StubError"
    # An unanswered question leaves the history: roles keep alternating.
    assert [len(r["body"]["messages"]) for r in primary.requests] == [2, 2, 2]


def test_no_fallback_configured_is_an_error(make_engine, endpoint_file, tmp_path):
    engine = make_engine()
    engine.behaviour = "status"
    endpoint_file.write(OPENAI_BASE_URL=engine.url)
    records = run(endpoint_file, tmp_path / "log.jsonl", "--sessions", "1", "--max-requests", "1",
                  fallback="")
    assert [(r["outcome"], r["status"], r["error"]) for r in records] == [("error", 503, "HTTP 503 StubError")]


def test_client_error_does_not_fall_back(make_engine, fallback, endpoint_file, tmp_path):
    engine = make_engine()
    engine.behaviour, engine.status_code = "status", 400
    endpoint_file.write(OPENAI_BASE_URL=engine.url)
    records = run(endpoint_file, tmp_path / "log.jsonl", "--sessions", "1", "--max-requests", "2",
                  fallback=fallback.url)
    assert [(r["outcome"], r["status"], r["error"]) for r in records] == [("error", 400, "HTTP 400 StubError")] * 2
    assert fallback.requests == {}


def test_large_client_error_body_does_not_fall_back(make_engine, fallback, endpoint_file, tmp_path):
    engine = make_engine()
    engine.behaviour, engine.status_code, engine.error_pad = "status", 400, 300_000
    endpoint_file.write(OPENAI_BASE_URL=engine.url)
    records = run(endpoint_file, tmp_path / "log.jsonl", "--sessions", "1", "--max-requests", "1",
                  fallback=fallback.url)
    # Only the body's first 64 KiB is read: too little to parse its type.
    assert [(r["outcome"], r["status"], r["error"]) for r in records] == [("error", 400, "HTTP 400")]
    assert fallback.requests == {}


# -- streaming ------------------------------------------------------------


def test_streaming_reads_each_stream_to_done(make_engine, endpoint_file, tmp_path):
    engine = make_engine()
    endpoint_file.write(VLLM_FLEET_MODE="direct", OPENAI_BASE_URL=engine.url)
    records = run(endpoint_file, tmp_path / "log.jsonl", "--stream", "--sessions", "1", "--max-requests", "3")
    assert [(r["outcome"], r["status"]) for r in records] == [("ok", 200)] * 3
    first, second = engine.requests[0], engine.requests[1]
    assert first["body"]["stream"] is True
    assert first["headers"]["Accept"] == "text/event-stream"
    # The deltas were joined back into the whole answer.
    assert second["body"]["messages"][2] == {"role": "assistant", "content": engine.answer}


def test_streaming_fallback_is_streamed_too(make_engine, fallback, endpoint_file, tmp_path):
    primary, backup = make_engine("primary"), make_engine("backup")
    primary.behaviour = "break"
    endpoint_file.write(OPENAI_BASE_URL=primary.url)
    records = run(endpoint_file, tmp_path / "log.jsonl", "--stream", "--sessions", "1", "--max-requests", "2",
                  fallback=backup.url)
    assert [r["outcome"] for r in records] == ["fallback"] * 2
    assert backup.requests[0]["body"]["stream"] is True
    assert primary.requests[1]["body"]["messages"][2]["content"] == backup.answer


def test_read_stream_of_the_real_fallback_server(fallback):
    body = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
    assert post_chat(fallback.url, body, timeout=2).text == fallback.text


# -- what the log must never hold -----------------------------------------


def test_log_holds_no_prompt_text_and_no_api_key(make_engine, endpoint_file, tmp_path):
    primary, backup = make_engine("primary"), make_engine("backup")
    # Requests 3 and 4 fail with an error body that quotes the prompt.
    primary.fail_numbers = {3, 4}
    endpoint_file.write(VLLM_FLEET_MODE="direct", OPENAI_BASE_URL=primary.url, OPENAI_API_KEY=API_KEY)
    log = tmp_path / "log.jsonl"
    records = run(endpoint_file, log, "--sessions", "2", "--max-requests", "6", fallback=backup.url)
    assert sorted(r["outcome"] for r in records) == ["fallback"] * 2 + ["ok"] * 4
    assert {r["headers"]["Authorization"] for r in primary.requests} == {f"Bearer {API_KEY}"}
    # The fallback is another service: the model's key is not sent there.
    assert all("Authorization" not in r["headers"] for r in backup.requests)
    text = log.read_text()
    assert API_KEY not in text
    contents = {m["content"] for r in primary.requests + backup.requests for m in r["body"]["messages"]
                if m["role"] != "assistant"}
    for content in contents:
        for start in range(0, len(content) - 24, 24):
            assert content[start:start + 24] not in text


# -- the summary ----------------------------------------------------------


T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def rec(at: float, outcome: str, session: int = 1, latency: float = 10.0, mode: str | None = "gate",
        turn: int = 0) -> dict:
    return {"ts": (T0 + timedelta(seconds=at)).isoformat(timespec="milliseconds"), "session": session,
            "turn": turn, "mode": mode, "base_url": "http://gate/v1", "outcome": outcome, "status": 200,
            "latency_ms": latency, "error": None}


def iso(at: float) -> str:
    return (T0 + timedelta(seconds=at)).isoformat(timespec="milliseconds")


@pytest.mark.parametrize(("records", "outcomes", "runs", "longest"), [
    ([], {"ok": 0, "fallback": 0, "error": 0}, 0, None),
    ([rec(0, "ok"), rec(1, "ok")], {"ok": 2, "fallback": 0, "error": 0}, 0, None),
    # One fallback: the run lasts as long as its request.
    ([rec(0, "ok"), rec(1, "fallback", latency=250), rec(2, "ok")],
     {"ok": 2, "fallback": 1, "error": 0}, 1, {"requests": 1, "seconds": 0.25, "start": iso(1), "last_start": iso(1)}),
    # Longest by time, not by count: 3 quick fallbacks lose to 2 spread over 5 s.
    ([rec(0, "fallback"), rec(0.1, "fallback"), rec(0.2, "fallback"), rec(1, "ok"),
      rec(10, "fallback"), rec(15, "fallback", latency=500), rec(16, "ok")],
     {"ok": 2, "fallback": 5, "error": 0}, 2, {"requests": 2, "seconds": 5.5, "start": iso(10), "last_start": iso(15)}),
    # An error ends a run as an ok does.
    ([rec(0, "fallback"), rec(1, "fallback"), rec(2, "error"), rec(3, "fallback")],
     {"ok": 0, "fallback": 3, "error": 1}, 2, {"requests": 2, "seconds": 1.01, "start": iso(0), "last_start": iso(1)}),
    # Out of file order and across sessions: one outage seen by three sessions.
    ([rec(4, "fallback", session=3), rec(0, "ok", session=1), rec(2, "fallback", session=1),
      rec(3, "fallback", session=2), rec(6, "ok", session=2), rec(5, "fallback", session=1, latency=1000)],
     {"ok": 2, "fallback": 4, "error": 0}, 1, {"requests": 4, "seconds": 4.0, "start": iso(2), "last_start": iso(5)}),
])
def test_summarise_crafted(records, outcomes, runs, longest):
    summary = summarise(records)
    assert summary["records"] == len(records)
    assert summary["outcomes"] == outcomes
    assert summary["fallback_runs"] == runs
    assert summary["longest_fallback_run"] == longest
    assert summary["longest_fallback_run_s"] == (longest["seconds"] if longest else 0.0)


def test_summarise_modes_timestamps_and_window():
    records = [rec(0, "ok", mode="direct"), rec(1, "fallback"), rec(2, "error", mode=None),
               rec(3, "fallback"), rec(4, "ok")]
    summary = summarise(records)
    assert summary["by_mode"] == {"direct": {"ok": 1, "fallback": 0, "error": 0},
                                  "gate": {"ok": 1, "fallback": 2, "error": 0},
                                  "unknown": {"ok": 0, "fallback": 0, "error": 1}}
    assert (summary["first_ts"], summary["last_ts"]) == (iso(0), iso(4))
    assert (summary["first_fallback_ts"], summary["last_fallback_ts"]) == (iso(1), iso(3))
    assert (summary["first_error_ts"], summary["last_error_ts"]) == (iso(2), iso(2))
    window = summarise(records, since=T0 + timedelta(seconds=2.5), until=T0 + timedelta(seconds=3.5))
    assert window["outcomes"] == {"ok": 0, "fallback": 1, "error": 0}


def test_summary_command_on_a_crafted_file(tmp_path, capsys):
    path = tmp_path / "log.jsonl"
    lines = [json.dumps(rec(0, "ok")), "not json", json.dumps({"outcome": "maybe", "ts": iso(1)}), "",
             json.dumps(rec(1, "fallback")), json.dumps(rec(2, "fallback", latency=1000)), json.dumps(rec(4, "ok"))]
    path.write_text("\n".join(lines) + "\n")
    assert sc.main(["--summary", str(path)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["file"] == str(path)
    assert summary["bad_lines"] == 2
    assert summary["outcomes"] == {"ok": 2, "fallback": 2, "error": 0}
    assert summary["longest_fallback_run_s"] == 2.0
    # The subcommand spelling and a window.
    assert sc.main(["summarise", str(path), "--since", iso(2)]) == 0
    assert json.loads(capsys.readouterr().out)["outcomes"] == {"ok": 1, "fallback": 1, "error": 0}


def test_summary_of_a_missing_file(tmp_path, capsys):
    assert sc.main(["--summary", str(tmp_path / "none.jsonl")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_summary_of_a_real_run_measures_the_outage(make_engine, fallback, endpoint_file, tmp_path, capsys):
    engine = make_engine()
    engine.fail_numbers = {4, 5, 6, 7, 8}
    endpoint_file.write(VLLM_FLEET_MODE="gate", OPENAI_BASE_URL=engine.url)
    log = tmp_path / "log.jsonl"
    records = run(endpoint_file, log, "--sessions", "1", "--max-requests", "12", "--think-ms", "40",
                  fallback=fallback.url)
    assert [r["outcome"] for r in records] == ["ok"] * 3 + ["fallback"] * 5 + ["ok"] * 4
    assert sc.main(["--summary", str(log)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["outcomes"] == {"ok": 7, "fallback": 5, "error": 0}
    assert summary["by_mode"] == {"gate": {"ok": 7, "fallback": 5, "error": 0}}
    assert summary["fallback_runs"] == 1
    first, last = records[3], records[7]
    assert (summary["first_fallback_ts"], summary["last_fallback_ts"]) == (first["ts"], last["ts"])
    run_ = summary["longest_fallback_run"]
    assert run_["requests"] == 5 and run_["start"] == first["ts"] and run_["last_start"] == last["ts"]
    expected = (datetime.fromisoformat(last["ts"]) - datetime.fromisoformat(first["ts"])).total_seconds() \
        + last["latency_ms"] / 1000
    assert run_["seconds"] == pytest.approx(expected, abs=0.002)
    # Five requests 40 ms of think time apart: the outage lasted at least 4 pauses.
    assert 0.16 <= run_["seconds"] < 2.0


# -- bounds and signals ---------------------------------------------------


def test_max_requests_is_exact(make_engine, endpoint_file, tmp_path):
    engine = make_engine()
    endpoint_file.write(OPENAI_BASE_URL=engine.url)
    records = run(endpoint_file, tmp_path / "log.jsonl", "--sessions", "3", "--max-requests", "7")
    assert len(records) == 7 == len(engine.requests)


def test_zero_duration_sends_nothing(make_engine, endpoint_file, tmp_path):
    engine = make_engine()
    endpoint_file.write(OPENAI_BASE_URL=engine.url)
    assert run(endpoint_file, tmp_path / "log.jsonl", "--duration", "0") == []
    assert engine.requests == []


def _spawn(endpoint_file, log: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), "--endpoint-file", str(endpoint_file.path), "--log", str(log),
         "--fallback-url", "", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_duration_bounds_a_run(make_engine, endpoint_file, tmp_path):
    engine = make_engine()
    endpoint_file.write(OPENAI_BASE_URL=engine.url)
    log = tmp_path / "sub" / "dir" / "log.jsonl"
    start = time.monotonic()
    proc = _spawn(endpoint_file, log, "--duration", "1", "--think-ms", "50", "--sessions", "2")
    out, err = proc.communicate(timeout=10)
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, err
    assert elapsed < 4
    assert "done: ok" in err
    records = read_log(log)
    assert 4 <= len(records) == len(engine.requests)
    first = min(datetime.fromisoformat(r["ts"]) for r in records)
    last = max(datetime.fromisoformat(r["ts"]) for r in records)
    assert (last - first).total_seconds() < 1.2


def test_sigterm_cuts_a_request_in_flight(make_engine, endpoint_file, tmp_path):
    engine = make_engine()
    engine.behaviour, engine.delay_s = "slow", 8.0
    endpoint_file.write(OPENAI_BASE_URL=engine.url)
    log = tmp_path / "log.jsonl"
    proc = _spawn(endpoint_file, log, "--timeout", "20", "--sessions", "2")
    try:
        engine.wait_requests(2)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=5)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert time.monotonic() - sent < 3
    assert "stopped by signal" in err
    # The cut requests were not the endpoint's failure: nothing logged.
    assert log.exists() and read_log(log) == []


def test_sigterm_between_turns(make_engine, endpoint_file, tmp_path):
    engine = make_engine()
    endpoint_file.write(OPENAI_BASE_URL=engine.url)
    log = tmp_path / "log.jsonl"
    proc = _spawn(endpoint_file, log, "--think-ms", "30000", "--sessions", "3")
    try:
        engine.wait_requests(3)
        deadline = time.monotonic() + 5
        while len(read_log(log)) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=5)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert [r["outcome"] for r in read_log(log)] == ["ok"] * 3


# -- the log file and the options -----------------------------------------


def test_log_appends_and_survives_rotation(tmp_path):
    path = tmp_path / "a" / "log.jsonl"
    log = JsonlLog(str(path))
    log.write({"n": 1})
    os.rename(path, tmp_path / "rotated.jsonl")
    log.write({"n": 2})
    log.close()
    log = JsonlLog(str(path))
    log.write({"n": 3})
    log.close()
    log.write({"n": 4})  # after close: dropped, not an exception
    assert read_log(tmp_path / "rotated.jsonl") == [{"n": 1}]
    assert read_log(path) == [{"n": 2}, {"n": 3}]


def test_unwritable_log_fails_at_start(endpoint_file, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert sc.main(["--endpoint-file", str(endpoint_file.path), "--log", str(blocker / "log.jsonl")]) == 1
    assert "cannot open log" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["--max-tokens", "100", "--context-tokens", "100"], "--max-tokens must be smaller than --context-tokens"),
    (["--sessions", "0"], "must be >= 1"),
    (["--timeout", "0"], "--timeout must be > 0"),
    (["--think-ms", "-1"], "must be >= 0"),
    (["summarise"], "summarise needs a FILE"),
    (["--summary", "x", "--since", "yesterday"], "not an ISO 8601 timestamp"),
])
def test_bad_options(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        sc.parse_args(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_defaults_match_the_service():
    opts = sc.parse_args([])
    assert (opts.endpoint_file, opts.log, opts.fallback_url, opts.sessions) == (
        "/etc/vllm-fleet/endpoint.env", "/var/log/vllm-fleet/session-client.jsonl", "http://127.0.0.1:8001/v1", 3)
    assert (opts.duration, opts.max_requests, opts.stream) == (None, None, False)
