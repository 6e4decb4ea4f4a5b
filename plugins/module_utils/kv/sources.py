# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where ``vllm_kv_cache_info`` reads vLLM's output from, as byte chunks: a
file (:func:`file_chunks`), given text (:func:`text_chunks`) or a command's
stdout (:func:`command_chunks`, for the journal of the unit's current run,
:func:`unit_invocation`). Each way a source fails is a
:class:`~kv.errors.SourceError` with advice.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import typing as t

from ansible.module_utils.kv.errors import SourceError, UnitNotFoundError

# 1 MiB: why the scan reads this much at a time is in kv/scanner.py.
CHUNK_SIZE = 1 << 20
# A "line" longer than this is cut there, so one newline-free blob cannot
# grow memory without bound.
MAX_LINE = 1 << 20

# Surrogates that surrogateescape cannot turn back into bytes (JSON may carry
# them, e.g. "\ud800").
_LONE_SURROGATE = re.compile("[\ud800-\udc7f\udd00-\udfff]")


def text_chunks(text: str, offset: int = 0, chunk_size: int = CHUNK_SIZE) -> t.Iterator[bytes]:
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        data = _LONE_SURROGATE.sub("\ufffd", text).encode("utf-8", "surrogateescape")
    for i in range(offset, len(data), chunk_size):
        yield data[i:i + chunk_size]


def file_chunks(path: str, offset: int = 0, chunk_size: int = CHUNK_SIZE) -> t.Iterator[bytes]:
    """Read ``path`` in chunks; SourceError with advice for each way it can fail."""
    if not os.path.lexists(path):
        raise SourceError(
            "path %s does not exist. Check the vLLM log location on this host (the file the "
            "service's StandardOutput= or a shell redirect writes); for a systemd unit that logs "
            "to the journal, use unit= instead." % path)
    if os.path.isdir(path):
        raise SourceError("path %s is a directory; give the vLLM log file inside it." % path)
    try:
        f = open(path, "rb", buffering=0)
    except OSError as e:
        raise SourceError(
            "cannot read %s: %s. Run the task with become: true or make the log readable "
            "by the connecting user." % (path, e.strerror or e)) from None
    with f:
        try:
            if offset:
                f.seek(offset)
            while True:
                data = f.read(chunk_size)
                if not data:
                    return
                yield data
        except OSError as e:
            raise SourceError("cannot read %s: %s." % (path, e.strerror or e)) from None


def unit_invocation(unit: str, props: dict[str, str]) -> str:
    """The unit's current InvocationID, or UnitNotFoundError/SourceError."""
    if props.get("LoadState") == "not-found":
        raise UnitNotFoundError(
            "systemd unit %s not found (LoadState=not-found). Check the name with "
            "`systemctl list-unit-files '*vllm*'`, and run this on the host that runs the "
            "unit (the head node)." % unit)
    invocation = props.get("InvocationID", "")
    if not invocation:
        raise SourceError(
            "systemd unit %s has no current run (ActiveState=%s, no InvocationID): start it "
            "first, or read a saved log with path=." % (unit, props.get("ActiveState", "unknown")))
    return invocation


def command_chunks(argv: t.Sequence[str], what: str, offset: int = 0,
                   chunk_size: int = CHUNK_SIZE) -> t.Iterator[bytes]:
    """Stream a command's stdout through a pipe; SourceError when it fails."""
    with tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL)
        except (OSError, ValueError) as e:  # ValueError: a NUL byte in an argument
            raise SourceError("cannot run %s: %s." % (argv[0], getattr(e, "strerror", None) or e)) from None
        try:
            assert proc.stdout is not None
            skip = offset
            while True:
                data = proc.stdout.read(chunk_size)
                if not data:
                    break
                if skip:
                    if len(data) <= skip:
                        skip -= len(data)
                        continue
                    data, skip = data[skip:], 0
                yield data
        finally:
            if proc.stdout is not None:
                proc.stdout.close()
            rc = proc.wait()
        if rc != 0:
            err.seek(0)
            detail = err.read(2000).decode("utf-8", "replace").strip()
            raise SourceError(
                "%s failed (exit %d): %s. If the journal is not readable, run with become: true "
                "or add the user to the systemd-journal group."
                % (what, rc, detail or "no error output"))
