"""bench/lib/ (the benchmarks' own logic) importable by name, as bench/prefill_detect.py imports it."""
from __future__ import annotations

import sys
from pathlib import Path

_LIB = str(Path(__file__).resolve().parents[3] / "bench" / "lib")
if _LIB not in sys.path:
    sys.path.insert(0, _LIB)
