# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A cache of ``vllm serve --help=all`` and ``vllm --version``, one entry per install.

The help takes tens of seconds (vLLM imports torch and every config class), and
it only changes when the install does. An entry is keyed on a
:func:`fingerprint` that is read from the file system without running Python:
the real path of the ``vllm`` executable, its size and time, and the names and
times of the ``*.dist-info`` directories of its environment (two levels above
the executable). Installing, upgrading or removing a package changes a
dist-info directory, and so the key.

A file that cannot be read, is not JSON, or holds no help table or version is
a miss, never an error: the caller runs the commands and :meth:`HelpCache.save`
overwrites it.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass

from ansible.module_utils.flags.errors import VllmFlagsError
from ansible.module_utils.flags.help import FlagTable, parse_help
from ansible.module_utils.flags.values import load_json
from ansible.module_utils.shared.versions import version_from_output

# Bump when the entry's layout or meaning changes: older files become misses.
FORMAT = 1
DIST_INFO_GLOBS = ("lib/python*/site-packages/*.dist-info", "lib/python*/dist-packages/*.dist-info")


def environment_of(vllm_bin: str) -> str:
    """The environment (venv or prefix) that holds the real ``vllm_bin``: ``../..``."""
    return os.path.dirname(os.path.dirname(os.path.realpath(vllm_bin)))


def dist_infos(env: str) -> list[tuple[str, int]]:
    """``(path under env, mtime in ns)`` of every ``*.dist-info`` directory, sorted."""
    found = []
    for pattern in DIST_INFO_GLOBS:
        for path in glob.glob(os.path.join(glob.escape(env), pattern)):
            try:
                found.append((os.path.relpath(path, env), os.stat(path).st_mtime_ns))
            except OSError:
                continue    # removed while we looked: the next run sees the new set
    return sorted(found)


def fingerprint_of(real_bin: str, bin_size: int, bin_mtime_ns: int,
                   dists: list[tuple[str, int]]) -> str:
    """The cache key of an install described by these facts (pure)."""
    words = [f"vllm-help-cache {FORMAT}", real_bin, f"{bin_size} {bin_mtime_ns}"]
    words += [f"{path} {mtime}" for path, mtime in sorted(dists)]
    return hashlib.sha256("\0".join(words).encode("utf-8", "surrogateescape")).hexdigest()


def fingerprint(vllm_bin: str) -> str | None:
    """The cache key of the install ``vllm_bin`` belongs to; None when it has no
    ``*.dist-info`` directory, so that a change could not be seen."""
    real = os.path.realpath(vllm_bin)
    dists = dist_infos(environment_of(real))
    if not dists:
        return None
    try:
        st = os.stat(real)
    except OSError:
        return None
    return fingerprint_of(real, st.st_size, st.st_mtime_ns, dists)


@dataclass(frozen=True)
class CachedHelp:
    """A hit: the flag table and the version, read from the saved outputs."""

    table: FlagTable
    version: str


def read_entry(text: str) -> CachedHelp | None:
    """An entry's JSON as a :class:`CachedHelp`; None for anything else (pure):
    it never raises, whatever the file holds (cut, corrupt, deep, not text)."""
    try:
        data = load_json(text)
    except ValueError:
        return None
    # type(): a format of true would equal 1
    if not isinstance(data, dict) or type(data.get("format")) is not int or data["format"] != FORMAT:
        return None
    help_text, version_output = data.get("help"), data.get("version")
    if not isinstance(help_text, str) or not isinstance(version_output, str):
        return None
    version = version_from_output(version_output)
    if version is None:
        return None
    try:
        return CachedHelp(parse_help(help_text), version)
    except VllmFlagsError:
        return None


def entry_text(vllm_bin: str, help_text: str, version_output: str) -> str:
    """An entry's JSON (pure); ``vllm_bin`` is kept for whoever reads the folder."""
    return json.dumps({"format": FORMAT, "vllm_bin": os.path.realpath(vllm_bin),
                       "help": help_text, "version": version_output})


class HelpCache:
    """``<directory>/<key>.json`` files."""

    def __init__(self, directory: str):
        self.directory = directory

    def path(self, key: str) -> str:
        return os.path.join(self.directory, key + ".json")

    def load(self, key: str) -> CachedHelp | None:
        try:
            with open(self.path(key), encoding="utf-8") as handle:
                return read_entry(handle.read())
        except (OSError, ValueError):       # ValueError: not UTF-8, or a NUL in the path
            return None

    def save(self, key: str, text: str) -> None:
        """Write an entry atomically (mode 0644; the directory is made 0755).
        OSError when the directory cannot be written."""
        try:
            os.makedirs(self.directory, mode=0o755)
            os.chmod(self.directory, 0o755)     # makedirs' mode is masked by the umask
        except FileExistsError:
            pass
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=f".{key}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
                os.fchmod(handle.fileno(), 0o644)
            os.replace(tmp, self.path(key))
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
