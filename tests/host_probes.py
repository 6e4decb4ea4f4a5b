"""The real captures the host checks are tested over: tests/fixtures/nvidia-smi/
and tests/fixtures/host-probes/ (each folder's INDEX.md gives the sources)."""
from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SMI = FIXTURES / "nvidia-smi"
HOST = FIXTURES / "host-probes"

GB10_TABLE = "06_gb10_table_580_126_arctictraining345.txt"
GB10_CSV = "01_gb10_csv_memory_na_unsloth10283.txt"


def smi(name: str) -> str:
    """An nvidia-smi capture without its ``$ command`` line."""
    lines = (SMI / name).read_text().splitlines()
    return "\n".join(line for line in lines if not line.startswith("$ ")) + "\n"


def host(name: str) -> str:
    return (HOST / name).read_text()
