"""Tests for plugins/module_utils/host/preflight_disk.py: the disk check, and the
measurement over a model directory in tmp_path.
"""
from __future__ import annotations

import os

import pytest
from ansible.module_utils.host.gpu_preflight import GIB, Check
from ansible.module_utils.host.preflight_disk import (
    STAGED_FILES_LIMIT,
    check_disk,
    check_disk_path,
    nearest_existing,
    staged_bytes,
)


@pytest.mark.parametrize(
    "path,measured,free,staged,need,ok,detail",
    [
        ("/srv/models/model", "/srv/models/model", 500 * GIB, 0, 100, True,
         "/srv/models/model: 500.0 GiB free + 0.0 GiB already staged = 500.0 GiB, 100 GiB required"),
        ("/srv/models/model", "/srv", 50 * GIB, 0, 100, False,
         "/srv/models/model (not there yet: measured on /srv): 50.0 GiB free + 0.0 GiB already staged = 50.0 GiB, "
         "100 GiB required"),
        # a re-run: the staged model itself fills the disk
        ("/srv/models/model", "/srv/models/model", 20 * GIB, 90 * GIB, 100, True,
         "/srv/models/model: 20.0 GiB free + 90.0 GiB already staged = 110.0 GiB, 100 GiB required"),
        # a small disk in MiB, not "0.0 GiB" (the lab's 2 MiB staging tmpfs)
        ("/srv/stage/tiny", "/srv/stage", 2 * 1024 ** 2, 0, 0.005, False,
         "/srv/stage/tiny (not there yet: measured on /srv/stage): 2.0 MiB free + 0.0 GiB already staged = 2.0 MiB, "
         "0.005 GiB required"),
    ],
)
def test_check_disk(path, measured, free, staged, need, ok, detail):
    check = check_disk(path, measured, free, staged, need)
    assert (check.check, check.ok, check.detail) == ("disk_free", ok, detail)


@pytest.fixture
def model(tmp_path):
    """A staged model: weights, a config, a hub-cache style link, a nested folder."""
    root = tmp_path / "models" / "m"
    (root / "sub").mkdir(parents=True)
    (root / "model.safetensors").write_bytes(b"\0" * 4096)
    (root / "config.json").write_bytes(b"{}" * 50)
    (root / "sub" / "tokenizer.json").write_bytes(b"x" * 1000)
    (root / "link.safetensors").symlink_to(root / "model.safetensors")
    (root / "dangling").symlink_to(root / "gone")
    return root


def test_staged_bytes_counts_regular_files_and_skips_links(model):
    assert staged_bytes(str(model)) == 4096 + 100 + 1000
    assert staged_bytes(str(model / "model.safetensors")) == 4096
    # a link given as the path is not followed either
    assert staged_bytes(str(model / "link.safetensors")) == 0


def test_staged_bytes_stops_past_the_limit(model):
    # five entries: four files and links at the top, one in sub/
    assert staged_bytes(str(model), limit=5) == 5196
    assert staged_bytes(str(model), limit=4) is None
    assert STAGED_FILES_LIMIT == 20000


def test_nearest_existing(model):
    assert nearest_existing(str(model)) == str(model)
    assert nearest_existing(str(model / "not" / "yet")) == str(model)
    assert nearest_existing("/") == "/"


def test_check_disk_path_counts_what_is_staged(model):
    st = os.statvfs(model)
    free = st.f_bavail * st.f_frsize
    check = check_disk_path(str(model) + "/", 0.001)
    assert check == check_disk(str(model), str(model), free, 5196, 0.001)
    assert check.ok is True and "already staged" in check.detail


def test_check_disk_path_measures_a_missing_path_on_its_parent(model):
    missing = model / "not" / "yet"
    check = check_disk_path(str(missing), 10 ** 9)
    assert check.ok is False
    assert check.detail.startswith(f"{missing} (not there yet: measured on {model}): ")
    assert "0.0 GiB already staged" in check.detail


def test_check_disk_path_refuses_a_path_that_is_not_a_model_directory(model):
    check = check_disk_path(str(model), 0.001, limit=3)
    assert check == Check("disk_free", False, f"{model} holds more than 3 files; it is not a model directory",
                          "Point disk_path at the model's own directory.")
