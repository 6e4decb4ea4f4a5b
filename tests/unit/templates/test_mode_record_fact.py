"""The consumer's mode record (roles/serving_endpoint's executable local fact)
reads the endpoint file the applications read: run with sh over real and
hostile endpoint files, it prints JSON that Ansible parses, with only the
mode and base URL the file holds, and never the API key."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

TEMPLATE = (Path(__file__).resolve().parents[3] / "roles" / "serving_endpoint" / "templates" / "etc" / "ansible"
            / "facts.d" / "vllm_fleet.fact.j2")


@pytest.fixture(scope="module")
def fact(tmp_path_factory):
    """The rendered script and the endpoint file it reads."""
    root = tmp_path_factory.mktemp("fact")
    endpoint = root / "endpoint env"  # a space: the path is quoted
    text = TEMPLATE.read_text()
    assert "{{ ansible_managed | comment }}" in text and "{{ serving_endpoint_file | quote }}" in text
    text = text.replace("{{ ansible_managed | comment }}", "# managed").replace(
        "{{ serving_endpoint_file | quote }}", shlex.quote(str(endpoint)))
    script = root / "vllm_fleet.fact"
    script.write_text(text)
    script.chmod(0o755)
    return script, endpoint


def run(script: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(script)], capture_output=True, timeout=30)


def test_a_real_endpoint_file(fact):
    script, endpoint = fact
    endpoint.write_text("# Ansible managed\nVLLM_FLEET_MODE=gate\nOPENAI_BASE_URL=http://10.200.0.13:8100/v1\n"
                        "OPENAI_MODEL=tiny\nOPENAI_API_KEY=sk-lab-gate=client\n")
    out = run(script)
    assert out.returncode == 0 and json.loads(out.stdout) == {"mode": "gate", "base_url": "http://10.200.0.13:8100/v1"}
    assert b"sk-lab" not in out.stdout + out.stderr


def test_no_endpoint_file_yet_is_an_empty_record(fact):
    script, endpoint = fact
    endpoint.unlink(missing_ok=True)
    out = run(script)
    assert out.returncode == 0 and json.loads(out.stdout) == {}


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to another user")
def test_an_unreadable_endpoint_file_fails_and_says_why(fact, tmp_path):
    script, endpoint = fact
    endpoint.write_text("VLLM_FLEET_MODE=direct\n")
    endpoint.chmod(0o600)
    out = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(script)],
                         capture_output=True, timeout=30)
    assert out.returncode != 0 and b"Permission denied" in out.stderr


LINE = st.text(st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)), max_size=80)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.one_of(LINE, LINE.map(lambda v: "VLLM_FLEET_MODE=" + v),
                                LINE.map(lambda v: "OPENAI_BASE_URL=" + v)), max_size=8))
def test_any_endpoint_file_gives_json_with_only_what_it_holds(fact, lines):
    script, endpoint = fact
    endpoint.write_bytes("\n".join(lines).encode("utf-8", "surrogateescape"))
    out = run(script)
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)
    assert set(record) <= {"mode", "base_url"}
    for key, prefix in (("mode", "VLLM_FLEET_MODE="), ("base_url", "OPENAI_BASE_URL=")):
        values = [ln[len(prefix):] for ln in lines if ln.startswith(prefix)]
        assert (key in record) == bool(values)
        if values:
            # the last one wins, as the shell would read it; control characters dropped
            assert record[key] == "".join(c for c in values[-1] if not (ord(c) < 32 or ord(c) == 127))
