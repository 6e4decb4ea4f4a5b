"""The disk check of a host's preflight: room for the model where it is staged.
:func:`check_disk_path` measures this host's filesystem (``statvfs``) and walks what
is already staged; :func:`check_disk` is the pure verdict."""
from __future__ import annotations

import os
import stat

from ansible.module_utils.host.gpu_preflight import GIB, Check, gib_text, number_text

# A model directory has a few dozen files; stop counting a path that is not one.
STAGED_FILES_LIMIT = 20000

def check_disk(path: str, measured_path: str, free_bytes: int, staged_bytes: int, min_gib: float) -> Check:
    """Room for the model at ``path``: free space plus what is already staged
    there (a re-run must not fail because the model itself fills the disk)."""
    where = "" if measured_path == path else f" (not there yet: measured on {measured_path})"
    have = free_bytes + staged_bytes
    detail = (
        f"{path}{where}: {gib_text(free_bytes)} free + {gib_text(staged_bytes)} already staged = {gib_text(have)}, "
        f"{number_text(min_gib)} GiB required"
    )
    if have >= min_gib * GIB:
        return Check("disk_free", True, detail)
    return Check(
        "disk_free",
        False,
        detail,
        "Free space on that filesystem, or stage the model elsewhere and point disk_path at it.",
    )


def staged_bytes(path: str, limit: int = STAGED_FILES_LIMIT) -> int | None:
    """Bytes of the regular files under ``path`` (links not followed, so a hub
    cache's snapshot links do not count twice); None past ``limit`` files."""
    if not os.path.isdir(path):
        st = os.lstat(path)
        return st.st_size if stat.S_ISREG(st.st_mode) else 0
    total = files = 0
    for root, _dirs, names in os.walk(path):
        for n in names:
            files += 1
            if files > limit:
                return None
            try:
                st = os.lstat(os.path.join(root, n))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


def nearest_existing(path: str) -> str:
    """``path``, or its nearest parent that exists: the filesystem a model not staged yet will land on."""
    measured = path
    while not os.path.exists(measured) and measured != os.path.dirname(measured):
        measured = os.path.dirname(measured)
    return measured


def check_disk_path(disk_path: str, min_gib: float, limit: int = STAGED_FILES_LIMIT) -> Check:
    """:func:`check_disk` for ``disk_path``, measured on this host: the free
    space of its filesystem and what is already staged at it.

    A relative path (no filesystem to measure: the module's working directory
    is a temporary one) or a filesystem that cannot be measured is a failed
    check, not an error."""
    if not os.path.isabs(disk_path):
        return Check("disk_free", False, f"disk_path {disk_path} is not an absolute path",
                     "Set disk_path to the absolute path the model is staged at.")
    path = os.path.normpath(disk_path)
    measured = nearest_existing(path)
    try:
        st = os.statvfs(measured)
    except OSError as exc:
        return Check("disk_free", False, f"cannot measure the filesystem of {path} at {measured}: {exc}",
                     "Check that the path is readable by the user the module runs as.")
    staged = staged_bytes(path, limit) if measured == path else 0
    if staged is None:
        return Check("disk_free", False, f"{path} holds more than {limit} files; it is not a model directory",
                     "Point disk_path at the model's own directory.")
    return check_disk(path, measured, st.f_bavail * st.f_frsize, staged, min_gib)
