"""Every role documents exactly the variables it defaults (STYLE: defaults
and meta/argument_specs.yml name the same keys), every shared default is
written once (roles/vllm_fleet_defaults), every play lists that role first,
and every role with tasks has a molecule scenario that the lab run covers."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

ROLES = Path(__file__).resolve().parents[2] / "roles"
ROLE_DIRS = sorted(p for p in ROLES.iterdir() if p.is_dir())
# The role that only holds shared defaults and the engine record.
DEFAULTS_ROLE = ROLES / "vllm_fleet_defaults"
TASK_ROLES = [p for p in ROLE_DIRS if (p / "tasks").is_dir()]
# Roles whose only target is an external API that cannot run here, so no lab
# scenario can converge them; each names the test that runs it for real.
API_ROLES = {"awx_restart": "tests/unit/test_awx_restart.py (the playbook against a fake AWX API)"}
LAB_ROLES = [p for p in TASK_ROLES if p.name not in API_ROLES]
# Shared secrets, checked by the preflight of the role that uses each.
SECRETS = {"gate_service_admin_token", "vllm_server_api_key", "gate_service_api_keys", "vllm_fleet_fallback_api_key"}
REPO = ROLES.parent


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


def test_there_are_roles():
    assert ROLE_DIRS, "no roles found under roles/"


@pytest.mark.parametrize("role", ROLE_DIRS, ids=lambda p: p.name)
def test_defaults_match_argument_specs(role: Path):
    defaults = _load(role / "defaults" / "main.yml")
    specs = _load(role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
    public_defaults = {k for k in defaults if not k.startswith("_")}
    if role == DEFAULTS_ROLE:
        # A secret names a vault variable; argument validation at the first
        # play would fail on a missing vault file before the role that uses
        # the secret can say what to do (its own preflight checks it).
        public_defaults -= SECRETS
    assert public_defaults - set(specs) == set(), "defaulted but undocumented"
    documented_with_default = {k for k, v in specs.items() if "default" in v}
    assert documented_with_default - public_defaults == set(), "documented default missing in defaults/main.yml"


@pytest.mark.parametrize("role", TASK_ROLES, ids=lambda p: p.name)
def test_public_variables_are_prefixed_with_the_role(role: Path):
    """A role's own knobs carry its name; the only others it may take are
    what vllm_fleet_defaults provides (the engine record above all)."""
    specs = _load(role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
    provided = set(_load(DEFAULTS_ROLE / "defaults" / "main.yml")) | set(_load(DEFAULTS_ROLE / "vars" / "main.yml"))
    bad = [k for k in specs if not k.startswith(role.name + "_") and k not in provided]
    assert not bad, f"variables not prefixed with {role.name}_: {bad}"


SHARED_MOLECULE = ROLES.parent / ".config" / "molecule" / "config.yml"


def _sequence(value) -> list:
    """A test_sequence as written: ${VLLM_FLEET_MOLECULE_SEQUENCE:-[...]}, so
    that make test can shorten it (tests/integration/test_molecule.py); molecule
    runs the default alone."""
    m = re.fullmatch(r"\$\{VLLM_FLEET_MOLECULE_SEQUENCE:-(\[[^}]*\])\}", str(value))
    assert m, f"a test_sequence must read ${{VLLM_FLEET_MOLECULE_SEQUENCE:-[...]}}, got {value!r}"
    return yaml.safe_load(m.group(1))


@pytest.mark.parametrize("role", LAB_ROLES, ids=lambda p: p.name)
def test_every_role_has_a_molecule_scenario(role: Path):
    """One scenario per role, with a playbook for every step its sequence
    names (the shared config's sequence unless the scenario sets its own)."""
    scenario = role / "molecule" / "default"
    config = yaml.safe_load((scenario / "molecule.yml").read_text()) or {}
    shared = yaml.safe_load(SHARED_MOLECULE.read_text())
    sequence = _sequence(config.get("scenario", {}).get("test_sequence") or shared["scenario"]["test_sequence"])
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

    assert sorted(ROLES_IN_ORDER) == [p.name for p in LAB_ROLES]


@pytest.mark.parametrize("role, test", sorted(API_ROLES.items()))
def test_an_api_role_is_run_by_its_test(role, test):
    assert (REPO / test.split()[0]).is_file(), f"{role}: {test} is missing"


def test_the_defaults_role_has_no_tasks():
    assert not (DEFAULTS_ROLE / "tasks").exists(), "vllm_fleet_defaults holds defaults and vars only"


SHARED = set(_load(DEFAULTS_ROLE / "defaults" / "main.yml"))


@pytest.mark.parametrize("role", TASK_ROLES, ids=lambda p: p.name)
def test_no_role_restates_a_shared_default(role: Path):
    """One fact in one place: a default of vllm_fleet_defaults is never
    defaulted again by another role."""
    restated = SHARED & set(_load(role / "defaults" / "main.yml"))
    assert not restated, f"{role.name} restates shared defaults: {sorted(restated)}"


def _yaml_files():
    skip = {".venv", ".cache", "work", "fixtures"}
    for path in REPO.rglob("*.yml"):
        if not skip & set(path.relative_to(REPO).parts) and path.parent != DEFAULTS_ROLE / "defaults":
            yield path
    yield from (REPO / "roles").rglob("*.j2")


def test_no_file_gives_a_shared_variable_a_default_of_its_own():
    """`vllm_server_port | default(8000)` restates a default: every play has
    vllm_fleet_defaults, so the variable is always defined."""
    import re

    pattern = re.compile(r"\b(" + "|".join(sorted(SHARED)) + r")\s*\|\s*default\(")
    found = [f"{p.relative_to(REPO)}: {m.group(0)}" for p in _yaml_files() for m in pattern.finditer(p.read_text())]
    assert not found, found


def _plays():
    for path in [REPO / "site.yml", *(REPO / "playbooks").glob("*.yml"), *(REPO / "lab" / "playbooks").glob("*.yml"),
                 *(REPO / "roles").glob("*/molecule/*/*.yml"), *(REPO / "tests" / "molecule").glob("*.yml")]:
        for play in yaml.safe_load(path.read_text()) or []:
            if isinstance(play, dict) and "hosts" in play:
                yield path, play


PLAYS = list(_plays())


@pytest.mark.parametrize("path,play", PLAYS, ids=[f"{p.relative_to(REPO)}:{pl.get('name')}" for p, pl in PLAYS])
def test_every_play_lists_the_defaults_role_first(path: Path, play: dict):
    if path.parent.name == "molecule" and path.parent.parent.name == "tests":
        pytest.skip("the lab's create/destroy plays run no role")
    if path == REPO / "playbooks" / "heal.yml":
        # ansible-rulebook runs it from a copy of playbooks/ (no roles there) with an inventory of
        # the controller alone: the restart it starts runs from the checkout, with the defaults.
        assert "roles" not in play
        return
    roles = [r["role"] if isinstance(r, dict) else r for r in play.get("roles", [])]
    assert roles[:1] == ["vllm_fleet_defaults"], f"{path.relative_to(REPO)}: play {play.get('name')!r} roles {roles}"


def _tasks_from_targets():
    """(role, entry point) for every include_role/import_role with tasks_from."""
    targets = set()
    for path in _yaml_files():
        if path.suffix != ".yml":
            continue
        def walk(node):
            if isinstance(node, dict):
                for key in ("ansible.builtin.include_role", "ansible.builtin.import_role"):
                    spec = node.get(key)
                    if isinstance(spec, dict) and "tasks_from" in spec:
                        targets.add((spec["name"], Path(spec["tasks_from"]).stem))
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for value in node:
                    walk(value)
        walk(yaml.safe_load(path.read_text()))
    return sorted(targets)


TASKS_FROM = _tasks_from_targets()


def test_there_are_tasks_from_entry_points():
    assert ("serving_cutover", "engines") in TASKS_FROM and ("ray_cluster", "service") in TASKS_FROM


@pytest.mark.parametrize("role,entry", TASKS_FROM, ids=[f"{r}:{e}" for r, e in TASKS_FROM])
def test_every_tasks_from_entry_point_has_its_own_argument_specs(role: str, entry: str):
    """Ansible validates an entry point's inputs only when argument_specs has
    an entry of that name."""
    specs = _load(ROLES / role / "meta" / "argument_specs.yml")["argument_specs"]
    assert entry in specs, f"roles/{role}/meta/argument_specs.yml has no entry point {entry!r}"
    assert (ROLES / role / "tasks" / f"{entry}.yml").is_file()
    main = specs["main"]["options"]
    for key, option in (specs[entry].get("options") or {}).items():
        assert main.get(key) == option, f"{role}:{entry} documents {key} differently from main"


def test_a_missing_vault_secret_gets_the_gate_roles_own_message(tmp_path):
    """The example inventory points gate_service_admin_token at a vault
    variable; when the vault file is missing the gate role says what to do,
    instead of an undefined-variable error halfway through the play."""
    import os
    import subprocess

    playbook = tmp_path / "pb.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Gate preflight without its vault", "hosts": "localhost", "gather_facts": False,
        "roles": [{"role": "vllm_fleet_defaults"}],
        "vars": {"gate_service_admin_token": "{{ vault_gate_admin_token }}"},
        "tasks": [{"name": "Preflight",
                   "ansible.builtin.include_role": {"name": "gate_service", "tasks_from": "preflight.yml"}}],
    }]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_ROLES_PATH=str(ROLES))
    r = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                        str(playbook)],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode != 0
    assert "gate_service_admin_token is unset or shorter than 16 characters" in r.stdout, r.stdout[-2000:]
    assert "group_vars/gate/vault.yml" in r.stdout
    assert "undefined" not in r.stdout.lower().split("gate_service_admin_token is unset")[0][-400:]


def _schedule_preflight(tmp_path: Path, *extra: str):
    """restart_schedule's preflight alone, on localhost, scheduling against the lab's inventory."""
    import os
    import subprocess

    playbook = tmp_path / "pb.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Schedule preflight", "hosts": "localhost", "gather_facts": False,
        "roles": [{"role": "vllm_fleet_defaults"}],
        "vars": {"restart_schedule_inventory": str(REPO / "inventory" / "lab" / "hosts.yml"),
                 "restart_schedule_project_dir": str(REPO), "restart_schedule_venv": str(REPO / ".venv"),
                 "restart_schedule_private_dir": str(tmp_path / "runner")},
        "tasks": [{"name": "Preflight",
                   "ansible.builtin.include_role": {"name": "restart_schedule", "tasks_from": "preflight.yml"}}],
    }]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_ROLES_PATH=str(ROLES))
    return subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}", str(playbook), *extra],
                          capture_output=True, text=True, env=env, timeout=120)


def test_a_schedule_against_the_lab_is_refused_with_the_commands_to_run(tmp_path):
    """A cron entry against the lab's inventory would restart the lab's hosts every
    night: refused before anything is written, with the commands that name an inventory."""
    r = _schedule_preflight(tmp_path)
    assert r.returncode != 0
    out = " ".join(r.stdout.split())
    assert (
        "Nothing was changed: the entry would run the rolling restart every night against the lab's inventory"
        f" ({REPO}/inventory/lab/hosts.yml). Schedule it with your site's:"
        " ansible-playbook -i inventory/<site> playbooks/schedule-restart.yml. To schedule against the lab on"
        " purpose (its own tests do):"
        " ansible-playbook -i localhost, playbooks/schedule-restart.yml -e vllm_fleet_allow_lab_schedule=true"
    ) in out, r.stdout[-3000:]
    assert not (tmp_path / "runner").exists()


def test_a_schedule_against_the_lab_passes_the_preflight_when_asked(tmp_path):
    r = _schedule_preflight(tmp_path, "-e", "vllm_fleet_allow_lab_schedule=true")
    assert r.returncode == 0, r.stdout[-3000:]
    assert "Nothing was changed" not in r.stdout

