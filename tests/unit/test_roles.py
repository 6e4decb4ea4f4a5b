"""Every role documents exactly the variables it defaults (STYLE: defaults
and meta/argument_specs.yml name the same keys), and has a molecule
scenario that the lab run covers."""
from __future__ import annotations

import sys
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


SHARED_MOLECULE = ROLES.parent / ".config" / "molecule" / "config.yml"


@pytest.mark.parametrize("role", ROLE_DIRS, ids=lambda p: p.name)
def test_every_role_has_a_molecule_scenario(role: Path):
    """One scenario per role, with a playbook for every step its sequence
    names (the shared config's sequence unless the scenario sets its own)."""
    scenario = role / "molecule" / "default"
    config = yaml.safe_load((scenario / "molecule.yml").read_text()) or {}
    shared = yaml.safe_load(SHARED_MOLECULE.read_text())
    sequence = config.get("scenario", {}).get("test_sequence") or shared["scenario"]["test_sequence"]
    for step in ("converge", "verify"):
        assert step in sequence, f"{role.name}: the scenario never runs {step}"
    for step in ("converge", "verify", "prepare"):
        path = scenario / f"{step}.yml"
        assert (step in sequence) == path.is_file(), (
            f"{role.name}: {step}.yml {'missing' if step in sequence else 'present but never run'}"
        )
    # create and destroy are shared: the lab's hosts are the instances.
    assert "idempotence" in sequence and sequence[-1] == "destroy"


def test_the_lab_run_covers_every_scenario():
    sys.path.insert(0, str(ROLES.parent / "tests" / "integration"))
    from test_molecule import ROLES_IN_ORDER

    assert sorted(ROLES_IN_ORDER) == [p.name for p in ROLE_DIRS]
