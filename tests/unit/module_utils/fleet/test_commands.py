"""The printed ansible-playbook command: the run's -i options before the playbook."""
from __future__ import annotations

import pytest
from ansible.module_utils.fleet.commands import command
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize("inventory_arg, expected", [
    ("-i inventory/site", "ansible-playbook -i inventory/site site.yml --check"),
    ("  -i inventory/site  ", "ansible-playbook -i inventory/site site.yml --check"),
    ("", "ansible-playbook site.yml --check"),
    (None, "ansible-playbook site.yml --check"),
    (["-i", "x"], "ansible-playbook site.yml --check"),
])
def test_the_inventory_goes_before_the_playbook(inventory_arg, expected):
    assert command(inventory_arg, "site.yml", "--check") == expected


@given(st.text(max_size=200), st.lists(st.text(min_size=1, max_size=20), max_size=4))
def test_no_double_spaces_from_empty_parts(inventory_arg, options):
    line = command(inventory_arg, "playbooks/rolling-restart.yml", *options)
    assert line.startswith("ansible-playbook ")
    assert "playbooks/rolling-restart.yml" in line
