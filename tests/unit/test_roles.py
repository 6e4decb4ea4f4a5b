"""Every role documents exactly the variables it defaults (STYLE: defaults
and meta/argument_specs.yml name the same keys)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROLES = Path(__file__).resolve().parents[2] / "roles"
ROLE_DIRS = sorted(p for p in ROLES.iterdir() if p.is_dir())


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


def test_there_are_roles():
    assert ROLE_DIRS, "no roles found under roles/"


@pytest.mark.parametrize("role", ROLE_DIRS, ids=lambda p: p.name)
def test_defaults_match_argument_specs(role: Path):
    defaults = _load(role / "defaults" / "main.yml")
    specs = _load(role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
    public_defaults = {k for k in defaults if not k.startswith("_")}
    assert public_defaults - set(specs) == set(), "defaulted but undocumented"
    documented_with_default = {k for k, v in specs.items() if "default" in v}
    assert documented_with_default - public_defaults == set(), "documented default missing in defaults/main.yml"


@pytest.mark.parametrize("role", ROLE_DIRS, ids=lambda p: p.name)
def test_public_variables_are_prefixed_with_the_role(role: Path):
    specs = _load(role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
    bad = [k for k in specs if not k.startswith(role.name + "_")]
    assert not bad, f"variables not prefixed with {role.name}_: {bad}"
