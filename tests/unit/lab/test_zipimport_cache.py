"""lab/python/lab_zipimport_cache.py: the lab hosts' bytecode cache for modules imported
from a zip (Ansible's module payloads). The code it returns must be the code Python
compiles, and any bad cache entry must fall back to compiling."""
from __future__ import annotations

import importlib
import sys
import zipfile
import zipimport
from pathlib import Path

import pytest

LAB_PYTHON = Path(__file__).resolve().parents[3] / "lab" / "python"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """The module loaded with its cache under tmp_path; zipimport restored afterwards."""
    monkeypatch.syspath_prepend(str(LAB_PYTHON))
    original = zipimport._compile_source
    sys.modules.pop("lab_zipimport_cache", None)
    module = importlib.import_module("lab_zipimport_cache")
    monkeypatch.setattr(module, "_DIR", str(tmp_path / "cache"))
    yield module
    zipimport._compile_source = original
    sys.modules.pop("lab_zipimport_cache", None)


def import_from_zip(tmp_path: Path, name: str, source: str):
    archive = tmp_path / f"{name}.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(f"{name}.py", source)
    sys.path.insert(0, str(archive))
    try:
        sys.modules.pop(name, None)
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(archive))
        sys.modules.pop(name, None)
        sys.path_importer_cache.pop(str(archive), None)


def test_a_second_import_reads_the_cached_code_and_behaves_the_same(cache, tmp_path):
    source = "def answer():\n    return sum(range(10))\n"
    first = import_from_zip(tmp_path, "payload_a", source)
    (entry,) = (tmp_path / "cache").iterdir()
    second = import_from_zip(tmp_path, "payload_a", source)
    assert first.answer() == second.answer() == 45
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [entry.name]


def test_a_changed_source_is_compiled_again(cache, tmp_path):
    assert import_from_zip(tmp_path, "payload_b", "VALUE = 1\n").VALUE == 1
    assert import_from_zip(tmp_path, "payload_b", "VALUE = 2\n").VALUE == 2
    assert len(list((tmp_path / "cache").iterdir())) == 2


def test_a_corrupt_entry_falls_back_to_compiling(cache, tmp_path):
    source = "VALUE = 'fresh'\n"
    import_from_zip(tmp_path, "payload_c", source)
    (entry,) = (tmp_path / "cache").iterdir()
    entry.write_bytes(b"\x00 not marshal data")
    assert import_from_zip(tmp_path, "payload_c", source).VALUE == "fresh"


def test_an_unwritable_cache_still_imports(cache, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setattr(cache, "_DIR", str(blocker / "cache"))  # under a file: cannot be made
    assert import_from_zip(tmp_path, "payload_d", "VALUE = 4\n").VALUE == 4
