"""Tests for plugins/module_utils/kv/sessions.py: the min_sessions check
over real line shapes, the options' ranges and the hybrid-model warning."""
from __future__ import annotations

import pytest
from ansible.module_utils.kv.errors import KvCacheError, NotEnoughSessionsError, OptionError
from ansible.module_utils.kv.scanner import scan_text
from ansible.module_utils.kv.sessions import check_options, check_sessions, figures_disagree
from kv_logs import BOOTLOGS, parse

# The field case: vLLM ~0.24 line shapes (bootlogs/20) for a 2,420,352-token
# pool with a 1,048,576-token context.
FIELD = (
    "(EngineCore pid=7476) INFO 07-25 13:42:38 [kv_cache_utils.py:2146] GPU KV cache size: 2,420,352 tokens\n"
    "(EngineCore pid=7476) INFO 07-25 13:42:38 [kv_cache_utils.py:2147] Maximum concurrency for 1,048,576 tokens "
    "per request: 2.31x\n")


def test_field_worked_example():
    report = scan_text(FIELD)
    assert (report.kv_cache_tokens, report.max_concurrency) == (2420352, 2.31)
    assert report.full_context_sessions(1048576) == 2
    assert report.full_context_sessions() == 2
    check_sessions(report, 1048576, 2)
    with pytest.raises(NotEnoughSessionsError) as e:
        check_sessions(report, 1048576, 3)
    assert str(e.value) == (
        "Only 2 full-context sessions fit (a KV cache pool of 2,420,352 tokens / 1,048,576-token context = 2.31x), "
        "but min_sessions is 3: session 3 would wait for KV cache. Give the engine more KV cache "
        "(gpu_memory_utilization, --kv-cache-dtype fp8, more or larger GPUs) or serve a shorter context.")


def test_check_sessions_messages():
    one = scan_text(FIELD.replace("2,420,352", "1,100,000").replace("2.31x", "1.05x"))
    with pytest.raises(NotEnoughSessionsError, match=r"^Only 1 full-context session fits \("):
        check_sessions(one, 1048576, 2)
    with pytest.raises(NotEnoughSessionsError, match=r"^Not one full-context session fits \(vLLM's 'Maximum "
                                                        r"concurrency for 29,000 tokens per request: 0\.82x'\)"):
        check_sessions(parse(BOOTLOGS / "04_v0_stripped_prefix_issue10517.log"), None, 1)
    with pytest.raises(NotEnoughSessionsError, match=r"^Cannot check min_sessions=1: the log has no 'Maximum "
                                                        r"concurrency' line; give context_tokens"):
        check_sessions(parse(BOOTLOGS / "11_v1_tp4_no_concurrency_line_issue21348.log"), None, 1)
    with pytest.raises(NotEnoughSessionsError, match=r"^Cannot check min_sessions=1: the log gives no token "
                                                        r"figure"):
        check_sessions(parse(BOOTLOGS / "05_v0_04x_tp2_distributed_gpu_executor_issue5248.log"), 2048, 1)
    # Not found: nothing to check (required= decides).
    check_sessions(parse(BOOTLOGS / "30_v1_083_health_and_usage_lines_no_size_issue16259.log"), 1, 5)


# --- the options' ranges -------------------------------------------------------------------

@pytest.mark.parametrize("context_tokens, min_sessions, msg", [
    (0, None, "context_tokens must be a positive integer, got 0."),
    (None, -2, "min_sessions must be a positive integer, got -2."),
    (0, 0, "context_tokens must be a positive integer, got 0."),      # the first one is named
    (1, -10 ** 1000, "min_sessions must be a positive integer, got a number of more than 30 digits."),
])
def test_check_options_refuses(context_tokens, min_sessions, msg):
    with pytest.raises(OptionError) as e:
        check_options(context_tokens, min_sessions)
    assert str(e.value) == msg
    assert isinstance(e.value, KvCacheError)


@pytest.mark.parametrize("context_tokens, min_sessions", [(None, None), (1, 1), (1048576, 3), (10 ** 1000, None)])
def test_check_options_takes(context_tokens, min_sessions):
    check_options(context_tokens, min_sessions)


# --- the two figures disagree (hybrid models before v0.20.1) ------------------------------------

HYBRID = BOOTLOGS / "13_v1_011_hybrid_tp2_duplicate_concurrency_issue28228.log"


def test_figures_disagree_on_the_real_hybrid_log():
    assert figures_disagree(parse(HYBRID), 120000) == (
        "vLLM's token figure (75840 tokens / 120000 = 0 sessions) and its concurrency ratio (2.48x) disagree, as "
        "for hybrid models before v0.20.1; full_context_sessions uses the token figure.")


@pytest.mark.parametrize("report, context_tokens", [
    (HYBRID, None),                                          # no context: the ratio is what counts
    (HYBRID, 2048),                                          # the ratio was printed for another context
    (FIELD, 1048576),                                        # both say 2
    (BOOTLOGS / "04_v0_stripped_prefix_issue10517.log", 29000),      # no token figure (V0)
    (BOOTLOGS / "11_v1_tp4_no_concurrency_line_issue21348.log", 32768),  # no ratio
    (BOOTLOGS / "30_v1_083_health_and_usage_lines_no_size_issue16259.log", 1),  # not found
])
def test_figures_agree_or_cannot_be_compared(report, context_tokens):
    report = scan_text(report) if isinstance(report, str) else parse(report)
    assert figures_disagree(report, context_tokens) is None
