# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the latest boot says about the KV cache pool: :class:`KvCacheReport`,
with one :class:`EngineKv` per engine, and the module's return keys
(:meth:`KvCacheReport.as_result`). Filled by ``kv/scanner.py``."""

from __future__ import annotations

import dataclasses
import math

# The report keeps the last EVIDENCE_MAX matched lines of the latest boot,
# each cut to EVIDENCE_LINE_MAX characters.
EVIDENCE_MAX = 16
EVIDENCE_LINE_MAX = 400


@dataclasses.dataclass
class PoolFigures:
    """A KV cache pool's figures as vLLM prints them; None where no line gave one."""

    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    concurrency_tokens: int | None = None
    device: str | None = None
    gpu_blocks: int | None = None
    cpu_blocks: int | None = None
    available_kv_cache_memory_gib: float | None = None

    def figures(self) -> dict:
        """The figures alone, in the order the module returns them."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(PoolFigures)}


@dataclasses.dataclass
class EngineKv(PoolFigures):
    """KV cache figures of one engine (one data-parallel replica)."""

    label: str = ""
    capacity_lines: int = 0

    def as_dict(self) -> dict:
        # The label first, then the figures, as the module returns each engine.
        return {"label": self.label, **self.figures(), "capacity_lines": self.capacity_lines}


@dataclasses.dataclass
class KvCacheReport(PoolFigures):
    """What the latest boot in the source says about the KV cache pool."""

    found: bool = False
    per_engine: list[EngineKv] = dataclasses.field(default_factory=list)
    vllm_version: str | None = None
    evidence: list[str] = dataclasses.field(default_factory=list)
    boots: int = 0
    boot_offset: int = 0
    bytes_read: int = 0

    @property
    def engines(self) -> int:
        return len(self.per_engine)

    def full_context_sessions(self, context_tokens: int | None = None) -> int | None:
        """Whole sessions of ``context_tokens`` (default: vLLM's max_model_len) that fit.

        With ``context_tokens``: floor(pool / context). The V0 block lines give
        no token figure, so there the printed ratio is used when it was
        printed for the same context length. Without ``context_tokens``:
        floor of the printed "Maximum concurrency" ratio.
        """
        if context_tokens:
            if self.kv_cache_tokens is not None:
                return self.kv_cache_tokens // context_tokens
            if self.max_concurrency is not None and self.concurrency_tokens == context_tokens:
                return int(math.floor(self.max_concurrency))
            return None
        if self.max_concurrency is not None:
            return int(math.floor(self.max_concurrency))
        return None

    def as_result(self, context_tokens: int | None = None) -> dict:
        """The module's return keys."""
        return {
            "found": self.found,
            **self.figures(),
            "engines": self.engines,
            "per_engine": [e.as_dict() for e in self.per_engine],
            "vllm_version": self.vllm_version,
            "full_context_sessions": self.full_context_sessions(context_tokens),
            "evidence": list(self.evidence),
        }
