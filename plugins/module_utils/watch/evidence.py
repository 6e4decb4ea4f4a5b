# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The evidence kept before a restart: what lets an operator find the cause
a restart only hides (the field story's lesson; docs/watch.md).

Pure logic for the ``vllm_evidence`` module, which gathers on each engine
host: the Python processes of the engine's units (``python_processes``,
whose stacks py-spy dumps), the units' journals, ``/proc/meminfo``, the CPU,
memory and I/O pressure, and the GPU's state. Every text passes ``mask``
before it is written: the values the caller names as secrets, and any
``Bearer`` token, ``--api-key``/``--hf-token`` value, ``*TOKEN*=`` /
``*KEY*=`` / ``*SECRET*=`` / ``*PASSWORD*=`` environment word and
``api_key=``-like setting, become ``MASK``.
``mask`` is linear in its input and raises WatchError only for input that is
not text.
"""

from __future__ import annotations

import datetime
import re
import typing as t

from ansible.module_utils.flags.secrets_mask import MASK
from ansible.module_utils.shared.numeric import brief
from ansible.module_utils.watch.errors import WatchError
from ansible.module_utils.watch.ledger import check_engine, parse_time

# A secret shorter than this is no secret worth the name, and masking it would
# mask every occurrence of two letters.
MIN_SECRET = 6
MAX_SECRETS = 256
# Each pattern's secret is its last group; the rest stays.
_PATTERNS = (
    re.compile(r"(?i)(\bbearer[ \t]+)([^\s\"',;]+)"),
    re.compile(r"(--(?:api-key|hf-token)(?:=|[ \t]+))([^\s\"',;]+)"),
    # An environment word (HF_TOKEN=..., VLLM_API_KEY: ...) or a known key name (api_key=...);
    # not every lower-case *tokens= (max_num_batched_tokens=2048 is evidence, not a secret).
    re.compile(r"((?:\b[A-Z_][A-Z0-9_]{0,63}(?:TOKEN|KEY|SECRET|PASSWORD)[A-Z0-9_]{0,63}"
               r"|\b(?:api_key|hf_token|access_token|auth_token|password|secret|token))"
               r"[\"']?[ \t]{0,8}[=:][ \t]{0,8}[\"']?)([^\s\"',;]+)"),
)
# A process of the engine's units whose stacks are worth a dump: the API
# server, the engine core, Ray's workers and raylets' Python side.
_PYTHON = re.compile(r"(^|/)python[0-9.]*$")
_ENGINE_WORDS = ("vllm", "ray::", "EngineCore", "VLLM::")


def _text(value: t.Any, what: str) -> str:
    if not isinstance(value, str):
        raise WatchError("%s must be text, got %s" % (what, brief(value)))
    return value


def secrets_of(values: t.Any) -> list[str]:
    """The secrets worth masking, longest first (so a secret that holds another is masked whole)."""
    if values is None:
        return []
    if not isinstance(values, (list, tuple)) or len(values) > MAX_SECRETS:
        raise WatchError("the secrets must be a list of at most %d strings" % MAX_SECRETS)
    out = {_text(v, "a secret") for v in values}
    # A secret of only '*' would be found again in MASK itself: it hides nothing anyway.
    return sorted((v for v in out if len(v) >= MIN_SECRET and v.strip("*")), key=len, reverse=True)


def mask(text: t.Any, secrets: t.Sequence[str] = ()) -> str:
    """``text`` with every secret value and every secret-looking word replaced by MASK."""
    out = _text(text, "the text")
    for secret in secrets:
        out = out.replace(secret, MASK)
    for pattern in _PATTERNS:
        out = pattern.sub(lambda m: m.group(1) + MASK, out)
    return out


def is_engine_python(cmdline: t.Sequence[str]) -> bool:
    """Whether a process (its argv) is one of the engine's Python processes: a
    Python interpreter, or a process that renamed itself (vLLM's engine core,
    Ray's workers)."""
    if not cmdline:
        return False
    first = cmdline[0].split(" ", 1)[0]
    # A path counts by its file name (Ray's gcs_server lives in the engine's venv too).
    title = first.rsplit("/", 1)[-1] if first.startswith("/") else cmdline[0]
    return bool(_PYTHON.search(first)) or any(word in title for word in _ENGINE_WORDS)


def python_processes(procs: t.Iterable[tuple[int, t.Sequence[str]]]) -> list[tuple[int, str]]:
    """The (pid, its command line shown, masked) of each engine Python process in ``procs``, by pid."""
    out = []
    for pid, cmdline in procs:
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
            raise WatchError("a process id must be a positive integer, got %s" % brief(pid))
        argv = [_text(a, "a command line word") for a in cmdline]
        if is_engine_python(argv):
            out.append((pid, mask(" ".join(argv))[:300]))
    return sorted(out)


def bundle_name(engine: str, host: str, at: str | datetime.datetime) -> str:
    """``<engine>-<host>-<UTC time>``: the bundle's file name without its suffix."""
    check_engine(engine)
    if not isinstance(host, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}", host):
        raise WatchError("host %s is no host name for a file name" % brief(host))
    return "%s-%s-%s" % (engine, host, parse_time(at, "at").strftime("%Y%m%dT%H%M%SZ"))
