"""Tests for plugins/module_utils/kv/sources.py: files, text, the unit's
journal through a command, and each way they fail."""
from __future__ import annotations

import re

import pytest
from ansible.module_utils.host.systemd import parse_show
from ansible.module_utils.kv.errors import SourceError
from ansible.module_utils.kv.sources import command_chunks, file_chunks, text_chunks, unit_invocation


def test_file_chunks_errors(tmp_path):
    missing = str(tmp_path / "nope.log")
    with pytest.raises(SourceError, match=r"^path %s does not exist\. Check the vLLM log location"
                       % re.escape(missing)):
        list(file_chunks(missing))
    with pytest.raises(SourceError, match=r"^path %s is a directory; give the vLLM log file inside it\.$"
                       % re.escape(str(tmp_path))):
        list(file_chunks(str(tmp_path)))


def test_file_and_text_chunks_offset(tmp_path):
    path = tmp_path / "a.log"
    path.write_bytes(b"0123456789")
    assert b"".join(file_chunks(str(path), 4, chunk_size=3)) == b"456789"
    assert b"".join(text_chunks("0123456789", 4, chunk_size=3)) == b"456789"


@pytest.mark.parametrize("props, message", [
    ({"LoadState": "not-found", "ActiveState": "inactive", "InvocationID": ""},
     "systemd unit x.service not found (LoadState=not-found)."),
    ({"LoadState": "loaded", "ActiveState": "inactive", "InvocationID": ""},
     "systemd unit x.service has no current run (ActiveState=inactive, no InvocationID)"),
])
def test_unit_invocation_errors(props, message):
    with pytest.raises(SourceError) as e:
        unit_invocation("x.service", props)
    assert str(e.value).startswith(message)


def test_systemctl_show_parse():
    props = parse_show("LoadState=loaded\nActiveState=active\nInvocationID=ab12\n")
    assert unit_invocation("x.service", props) == "ab12"


def test_command_chunks(tmp_path):
    assert b"".join(command_chunks(["printf", "hello\\nworld\\n"], "printf", offset=6)) == b"world\n"
    with pytest.raises(SourceError, match=r"^false failed \(exit 1\): no error output\."):
        list(command_chunks(["false"], "false"))
    with pytest.raises(SourceError, match=r"^cannot run %s" % re.escape(str(tmp_path))):
        list(command_chunks([str(tmp_path / "missing")], "missing"))
