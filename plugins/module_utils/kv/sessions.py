# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``vllm_kv_cache_info``'s policy on full-context sessions: the ranges of its
options (:func:`check_options`), the warning when vLLM's two figures disagree
(:func:`figures_disagree`) and the ``min_sessions`` check
(:func:`check_sessions`). Each failure is a :class:`~kv.errors.KvCacheError`
whose message says what mismatched and what to do.
"""

from __future__ import annotations

import math

from ansible.module_utils.kv.errors import NotEnoughSessionsError, OptionError
from ansible.module_utils.kv.pool import KvCacheReport
from ansible.module_utils.shared.numeric import shown


def check_options(context_tokens: int | None, min_sessions: int | None) -> None:
    """Raise OptionError for the first of the options that is given and not positive."""
    for name, value in (("context_tokens", context_tokens), ("min_sessions", min_sessions)):
        if value is not None and value < 1:
            # shown(): the argspec's int reads "-1e999" as a 1,000-digit int.
            raise OptionError("%s must be a positive integer, got %s." % (name, shown(value)))


def figures_disagree(report: KvCacheReport, context_tokens: int | None) -> str | None:
    """A warning when vLLM's token figure and its concurrency ratio, printed for
    ``context_tokens``, give different session counts (hybrid models before
    v0.20.1); None when they agree or one is missing."""
    if (report.found and context_tokens and report.kv_cache_tokens is not None
            and report.max_concurrency is not None and report.concurrency_tokens == context_tokens
            and report.kv_cache_tokens // context_tokens != int(math.floor(report.max_concurrency))):
        return ("vLLM's token figure (%d tokens / %d = %d sessions) and its concurrency ratio (%.2fx) "
                "disagree, as for hybrid models before v0.20.1; full_context_sessions uses the token figure."
                % (report.kv_cache_tokens, context_tokens, report.kv_cache_tokens // context_tokens,
                   report.max_concurrency))
    return None


def check_sessions(report: KvCacheReport, context_tokens: int | None,
                   min_sessions: int | None) -> None:
    """Raise NotEnoughSessionsError when fewer than ``min_sessions`` fit."""
    if not min_sessions or not report.found:
        return
    sessions = report.full_context_sessions(context_tokens)
    if sessions is None:
        if context_tokens:
            why = ("the log gives no token figure for the pool (V0 block counts only) and no "
                   "concurrency ratio for %d-token requests; drop context_tokens to check against "
                   "vLLM's own max_model_len" % context_tokens)
        else:
            why = ("the log has no 'Maximum concurrency' line; give context_tokens (the full "
                   "context you serve)")
        raise NotEnoughSessionsError("Cannot check min_sessions=%d: %s." % (min_sessions, why))
    if sessions >= min_sessions:
        return
    if context_tokens and report.kv_cache_tokens is not None:
        basis = "a KV cache pool of %s tokens / %s-token context = %.2fx" % (
            f"{report.kv_cache_tokens:,}", f"{context_tokens:,}",
            report.kv_cache_tokens / context_tokens)
    else:
        basis = "vLLM's 'Maximum concurrency for %s tokens per request: %.2fx'" % (
            f"{report.concurrency_tokens or 0:,}", report.max_concurrency or 0.0)
    if sessions == 0:
        fit = "Not one full-context session fits"
    else:
        fit = "Only %d full-context session%s" % (sessions, " fits" if sessions == 1 else "s fit")
    raise NotEnoughSessionsError(
        "%s (%s), but min_sessions is %d: session %d would wait for KV cache. Give the engine "
        "more KV cache (gpu_memory_utilization, --kv-cache-dtype fp8, more or larger GPUs) or "
        "serve a shorter context." % (fit, basis, min_sessions, sessions + 1))
