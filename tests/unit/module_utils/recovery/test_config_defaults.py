"""recovery/config.py's defaults are roles/engine_recovery's: the role writes every field
of recover.json, and a Config read without one (an older file, a hand-made one) must
mean what the role would have written. One test holds the two sources equal, field by
field, as the role's defaults render with the toolkit's own."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import jinja2
import pytest
import yaml
from ansible.module_utils.recovery.config import Config

REPO = Path(__file__).resolve().parents[4]
ROLE = REPO / "roles" / "engine_recovery"


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


# The role's variables as a site without overrides has them: the toolkit's shared defaults,
# then the role's defaults and vars (no ansible_port: ssh's own).
VARIABLES = {**_load(REPO / "roles" / "vllm_fleet_defaults" / "defaults" / "main.yml"),
             **_load(REPO / "roles" / "vllm_fleet_defaults" / "vars" / "main.yml"),
             **_load(ROLE / "defaults" / "main.yml"), **_load(ROLE / "vars" / "main.yml")}
WRITTEN = VARIABLES["__engine_recovery_config"]
# Fields that come from the engine record (every engine its own), not from a default.
PER_ENGINE = {"engine", "role", "backend", "vllm_unit", "ray_unit", "head_address", "ray_port", "master_port",
              "peers", "health_url", "api_address", "api_port", "python", "user"}


def _resolved(variables: dict) -> dict:
    """Each variable rendered, as Ansible does lazily, until none changes; one that needs an
    engine's record stays a template (a per-engine field)."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    done = dict(variables)
    for _ in range(5):
        changed = False
        for name, value in done.items():
            if isinstance(value, str) and "{{" in value:
                try:
                    rendered = env.from_string(value).render(done)
                except jinja2.TemplateError:  # undefined, or a filter only Ansible has
                    continue
                changed |= rendered != value
                done[name] = rendered
        if not changed:
            break
    return done


def _render(value):
    return jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(value).render(_resolved(VARIABLES))


def test_the_role_writes_every_field_of_the_config():
    assert set(WRITTEN) == {f.name for f in dataclasses.fields(Config)}


@pytest.mark.parametrize("field", sorted(f.name for f in dataclasses.fields(Config)
                                         if f.default is not dataclasses.MISSING and f.name not in PER_ENGINE))
def test_each_default_is_the_roles(field):
    default = Config.__dataclass_fields__[field].default
    written = _render(WRITTEN[field])
    assert type(default)(written) == default, (
        f"recover.json's {field}: the role writes {written!r}, recovery/config.py defaults to {default!r}")
