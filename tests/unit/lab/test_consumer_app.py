"""lab/playbooks/consumer-app.yml installs lab/consumer on the consumer hosts: every program and
every module they import from beside them must be in its copy loop, or a program fails there."""
from __future__ import annotations

from pathlib import Path

import yaml

LAB = Path(__file__).resolve().parents[3] / "lab"


def copied_files() -> list[str]:
    play = yaml.safe_load((LAB / "playbooks" / "consumer-app.yml").read_text())[0]
    task = next(t for t in play["tasks"] if t["name"] == "Copy the client and the fallback model")
    assert task["ansible.builtin.copy"]["dest"] == "{{ __lab_app_dir }}/{{ item }}"
    return task["loop"]


def test_every_python_file_of_lab_consumer_is_copied():
    sources = sorted(p.name for p in (LAB / "consumer").glob("*.py"))
    assert "session_client.py" in sources and "lab_http.py" in sources
    assert sorted(set(sources) - set(copied_files())) == []


def test_every_copied_file_exists():
    assert [name for name in copied_files() if not (LAB / "consumer" / name).is_file()] == []
