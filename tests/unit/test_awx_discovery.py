"""AWX offers a job template only the playbooks its project scan discovers:
files with a line that starts ``hosts:``, ``include:`` or
``import_playbook:`` (the FQCN ``ansible.builtin.import_playbook:`` does not
match), outside ``roles``, ``tasks``, ``group_vars``, ``host_vars`` and
dot-folders. Anything else is "Playbook not found for project". The rule is
AWX's own (awx/main/utils/ansible.py; docs/reference/restart.md, 1.6)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
AWX_PLAYBOOK_LINE = re.compile(r"^\s*?-?\s*?(?:hosts|include|import_playbook):", re.MULTILINE)
SKIPPED_DIRS = {"roles", "tasks", "group_vars", "host_vars"}
ENTRY_PLAYBOOKS = ["site.yml", *sorted(str(p.relative_to(REPO)) for p in (REPO / "playbooks").glob("*.yml"))]


def awx_discovers(path: Path) -> bool:
    parts = path.relative_to(REPO).parts[:-1]
    if any(p in SKIPPED_DIRS or p.startswith(".") for p in parts):
        return False
    return bool(AWX_PLAYBOOK_LINE.search(path.read_text(errors="replace")))


@pytest.mark.parametrize("playbook", ENTRY_PLAYBOOKS)
def test_awx_discovers_every_entry_playbook(playbook):
    assert awx_discovers(REPO / playbook), (
        f"{playbook}: AWX would not offer it; use `import_playbook:` (not the FQCN) or a play with hosts:")


@pytest.mark.parametrize("text, found", [
    ("- hosts: all\n", True),
    ("- name: x\n  hosts: all\n", True),
    ("- name: x\n  import_playbook: a.yml\n", True),
    ("- name: x\n  ansible.builtin.import_playbook: a.yml\n", False),
    ("# hosts: all\n", False),
])
def test_the_line_rule_is_awxs(text, found):
    assert bool(AWX_PLAYBOOK_LINE.search(text)) is found


def test_role_files_are_not_offered():
    assert not awx_discovers(REPO / "roles" / "vllm_restart" / "tasks" / "engine.yml")
