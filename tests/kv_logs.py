"""The captured vLLM boot logs the KV cache tests read (tests/fixtures), the
scan of one as ``vllm_kv_cache_info`` reads a path, and the hostile inputs
that once took more than linear time (shared by the tests of
plugins/module_utils/kv/)."""
from __future__ import annotations

from pathlib import Path

from ansible.module_utils.kv.pool import KvCacheReport
from ansible.module_utils.kv.scanner import scan_chunks
from ansible.module_utils.kv.sources import CHUNK_SIZE, file_chunks

FIXTURES = Path(__file__).resolve().parent / "fixtures"
BOOTLOGS = FIXTURES / "vllm-bootlogs"
CPU = FIXTURES / "vllm-cpu-0.32"
RAY = FIXTURES / "vllm-cpu-0.32-ray"


def parse(path: Path, chunk_size: int = CHUNK_SIZE) -> KvCacheReport:
    return scan_chunks(file_chunks(str(path), chunk_size=chunk_size), path.name)


def concat(*paths: Path) -> str:
    return "".join(p.read_text(encoding="utf-8") for p in paths)


LINE = "INFO 02-20 00:01:02 kv_cache_utils.py:522] "

# Each builds n characters that used to take quadratic (or worse) time, in the
# scan (kv/scanner.py) or the second pass (kv/not_found.py).
BUILDS = {
    "blocks line then spaces": lambda n: LINE + "# GPU blocks: 127626" + " " * n + "x\n",
    "blocks alone then spaces": lambda n: "# GPU blocks: 1" + " " * n + "\n",
    "pair line then spaces": lambda n: LINE + "# GPU blocks: 1, # CPU blocks: 2" + " " * n + "x\n",
    "size prefix repeated": lambda n: "KV cache siz" * (n // 12) + "\n",
    "size needle repeated": lambda n: "GPU KV cache size: " * (n // 19) + "\n",
    "concurrency prefix repeated": lambda n: "Maximum concurrency for " * (n // 24) + "\n",
    "hash repeated": lambda n: "# " * (n // 2) + "\n",
    "block line repeated": lambda n: "# GPU blocks: 1, " * (n // 17) + "\n",
    "vLLM repeated": lambda n: "vLLM " * (n // 5) + "\n",
    "args brace repeated": lambda n: "non-default args: {" * (n // 19) + "\n",
    "logo repeated": lambda n: "\u2580 " * (n // 2) + "\n",
    "logo then spaces": lambda n: "\u2580" + " " * n + "version x\n",
    "vLLM prefix repeated": lambda n: "INFO 11-29 16:10:10 " * (n // 20) + "\n",
    "elided vLLM prefix repeated": lambda n: "INFO ... " * (n // 9) + "[kv_cache_utils.py:1] x\n",
    "elided prefix then a long path": lambda n: "INFO ... [" + "a/" * (n // 2) + "\n",
    "dots after a level": lambda n: "INFO " + "." * n + " [kv_cache_utils.py:1] x\n",
    "vLLM prefix then a long path": lambda n: "INFO 11-29 16:10:10 [" + "a/" * (n // 2) + "\n",
    "process labels repeated": lambda n: "(EngineCore pid=1) " * (n // 19) + "GPU KV cache size: 1 tokens\n",
    "journald lead repeated": lambda n: "Dec 01 10:00:00 h v[1]: " * (n // 24) + "\n",
    "digits after a needle": lambda n: "GPU KV cache size: " + "9" * n + "\n",
    "groups after a needle": lambda n: "GPU KV cache size: 1" + ",000" * (n // 4) + "\n",
    "ratio digits": lambda n: "Maximum concurrency for 2048 tokens per request: " + "9" * n + "\n",
    "many short lines": lambda n: "GPU KV cache size: 1 tokens\n" * (n // 28),
    "ANSI repeated": lambda n: "\x1b[" * (n // 2) + "GPU KV cache size: 1 tokens\n",
    # A Ray worker's line with many lines glued on, and with labels that lead nowhere.
    "glued Ray lines repeated": lambda n: "(RayWorkerProc pid=1) INFO 12-03 09:54:28 [w.py:1] KV cache size: 1 tokens"
    * (n // 74) + "\n",
    "labels after a Ray line": lambda n: "(RayWorkerProc pid=1) INFO 12-03 09:54:28 [w.py:1] KV cache size "
    + "(EngineCore pid=1) INFO 12-03 " * (n // 30) + "\n",
}
