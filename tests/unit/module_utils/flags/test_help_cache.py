"""Tests for plugins/module_utils/flags/help_cache.py, with the real
``vllm serve --help=all`` of vLLM 0.32.0 and a venv laid out as pip lays it out."""
from __future__ import annotations

import json
import os
import shutil
import stat

import pytest
from ansible.module_utils.flags.help_cache import (
    FORMAT,
    HelpCache,
    dist_infos,
    entry_text,
    environment_of,
    fingerprint,
    fingerprint_of,
    read_entry,
)

VERSION_OUT = "INFO 11-29 16:01:11 [__init__.py:1] Automatically detected platform cpu.\n0.32.0\n"


@pytest.fixture
def venv(tmp_path):
    """/…/venv with bin/vllm and two packages' dist-info directories."""
    root = tmp_path / "venv"
    site = root / "lib" / "python3.11" / "site-packages"
    for dist in ("vllm-0.32.0.dist-info", "torch-2.9.0+cpu.dist-info"):
        (site / dist).mkdir(parents=True)
        (site / dist / "RECORD").write_text("")
    (site / "vllm").mkdir()                   # a package folder is not an install record
    exe = root / "bin" / "vllm"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    return root


def bump(path, ns=10 ** 9):
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + ns))


# ---- the fingerprint ----------------------------------------------------------

def test_dist_infos(venv):
    assert [p for p, _ in dist_infos(str(venv))] == [
        "lib/python3.11/site-packages/torch-2.9.0+cpu.dist-info",
        "lib/python3.11/site-packages/vllm-0.32.0.dist-info"]


def test_environment_follows_links(venv, tmp_path):
    link = tmp_path / "usr-local-bin-vllm"
    link.symlink_to(venv / "bin" / "vllm")
    assert environment_of(str(link)) == str(venv)
    assert fingerprint(str(link)) == fingerprint(str(venv / "bin" / "vllm"))


def test_fingerprint_of_is_pure():
    dists = [("lib/python3.11/site-packages/vllm-0.32.0.dist-info", 5)]
    key = fingerprint_of("/opt/venv/bin/vllm", 200, 7, dists)
    assert key == fingerprint_of("/opt/venv/bin/vllm", 200, 7, list(reversed(dists)))
    assert len(key) == 64 and int(key, 16) >= 0


CHANGES = [
    ("upgrade", lambda site: (site / "vllm-0.32.0.dist-info").rename(site / "vllm-0.33.0.dist-info")),
    ("install", lambda site: (site / "numpy-2.0.0.dist-info").mkdir()),
    ("remove", lambda site: shutil.rmtree(site / "torch-2.9.0+cpu.dist-info")),
    ("reinstall in place", lambda site: bump(site / "vllm-0.32.0.dist-info")),
    ("new python", lambda site: (site.parent.parent / "python3.12" / "site-packages" / "x-1.dist-info")
     .mkdir(parents=True)),
    ("script rewritten", lambda site: bump(site.parents[2] / "bin" / "vllm")),
]


@pytest.mark.parametrize("change", [c[1] for c in CHANGES], ids=[c[0] for c in CHANGES])
def test_fingerprint_changes_with_the_install(venv, change):
    exe = str(venv / "bin" / "vllm")
    before = fingerprint(exe)
    assert fingerprint(exe) == before            # stable while nothing changes
    change(venv / "lib" / "python3.11" / "site-packages")
    assert fingerprint(exe) != before


def test_no_fingerprint_without_dist_info(tmp_path):
    exe = tmp_path / "bin" / "vllm"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    assert fingerprint(str(exe)) is None
    assert fingerprint(str(tmp_path / "missing" / "bin" / "vllm")) is None


def test_dist_packages_count(tmp_path):
    # Debian's system pip: /usr/local/bin/vllm, /usr/local/lib/python3.11/dist-packages
    (tmp_path / "lib" / "python3.11" / "dist-packages" / "vllm-0.32.0.dist-info").mkdir(parents=True)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "vllm").write_text("")
    assert fingerprint(str(tmp_path / "bin" / "vllm")) is not None


# ---- entries ----------------------------------------------------------------

def test_entry_round_trip(help_all):
    hit = read_entry(entry_text("/opt/venv/bin/vllm", help_all, VERSION_OUT))
    assert hit.version == "0.32.0"
    assert "scheduler_reserve_full_isl" in hit.table.flags


@pytest.mark.parametrize("text", [
    "", "{", "[]", "null", json.dumps({"help": "x", "version": "0.32.0"}),           # no format
    json.dumps({"format": FORMAT + 1, "help": "x", "version": "0.32.0"}),            # a later format
    json.dumps({"format": FORMAT, "help": None, "version": "0.32.0"}),
    json.dumps({"format": FORMAT, "help": "usage: ray start\n", "version": "0.32.0"}),  # not vLLM's help
    "TRUNCATED",
], ids=["empty", "cut", "list", "null", "no format", "later format", "no help", "other help", "junk"])
def test_corrupt_entries_are_misses(text):
    assert read_entry(text) is None


def test_entry_without_a_version_is_a_miss(help_all):
    assert read_entry(entry_text("/x/vllm", help_all, "unknown flag\n")) is None


def test_save_and_load(tmp_path, help_all):
    cache = HelpCache(str(tmp_path / "cache" / "help"))
    key = "a" * 64
    assert cache.load(key) is None                # no directory yet: a miss
    old_umask = os.umask(0o077)                   # a strict umask must not leave them private
    try:
        cache.save(key, entry_text("/x/vllm", help_all, VERSION_OUT))
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(os.stat(cache.directory).st_mode) == 0o755
    assert stat.S_IMODE(os.stat(cache.path(key)).st_mode) == 0o644
    assert os.listdir(cache.directory) == [key + ".json"]      # no temporary file left
    assert cache.load(key).version == "0.32.0"


def test_save_overwrites_a_corrupt_entry(tmp_path, help_all):
    cache = HelpCache(str(tmp_path))
    key = "b" * 64
    (tmp_path / (key + ".json")).write_text("{cut")
    assert cache.load(key) is None
    cache.save(key, entry_text("/x/vllm", help_all, VERSION_OUT))
    assert cache.load(key).version == "0.32.0"
    assert os.listdir(tmp_path) == [key + ".json"]


def test_unreadable_entries_are_misses(tmp_path):
    cache = HelpCache(str(tmp_path))
    (tmp_path / ("c" * 64 + ".json")).mkdir()                  # a directory where the file should be
    assert cache.load("c" * 64) is None
    (tmp_path / ("d" * 64 + ".json")).write_bytes(b"\xff\xfe not utf-8")
    assert cache.load("d" * 64) is None


def test_save_into_an_unwritable_place_raises(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError):
        HelpCache(str(tmp_path / "file" / "help")).save("e" * 64, "{}")
