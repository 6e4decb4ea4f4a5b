"""A wrong inventory is refused before any host is contacted.

Each case writes an inventory to a temporary folder (the shape of
inventory/lab: hosts.yml and group_vars/) whose hosts all sit at
127.0.0.1:9 over ssh, where nothing listens: a connection attempt fails at
once and shows as UNREACHABLE. The real entry playbook then runs against it
and must stop in the preflight's localhost play (playbooks/preflight.yml),
with a message that names the mistake and its fix, and no host in the recap.
Two controls prove the harness can see a contact: a good inventory, and one
that a playbook which needs the engines only accepts, both go past that play
to the hosts.

One ansible-playbook run per case, all run up front a few at a time (a run
costs seconds): the parametrized test reads their results.
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import jinja2
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = REPO / ".venv" / "bin" / "ansible-playbook"
PREFLIGHT = REPO / "playbooks" / "preflight.yml"
PREFLIGHT_PLAYS = yaml.safe_load(PREFLIGHT.read_text())
LOCAL_PLAY = PREFLIGHT_PLAYS[0]["name"]
# Every host is reached here, and nothing listens there.
CONNECTION = {"ansible_host": "127.0.0.1", "ansible_port": 9, "ansible_connection": "ssh"}


# --- which playbooks are entry points -------------------------------------------------------

def _plays(path: Path) -> list:
    return yaml.safe_load(path.read_text()) or []


def _import(play: dict):
    return play.get("import_playbook") or play.get("ansible.builtin.import_playbook")


def _imports(path: Path) -> list[Path]:
    return [(path.parent / _import(p)).resolve() for p in _plays(path) if _import(p)]


PLAYBOOKS = [REPO / "site.yml", *sorted((REPO / "playbooks").glob("*.yml"))]
IMPORTED = {target for path in PLAYBOOKS for target in _imports(path)}
# An entry point is a playbook no other imports; the others are its parts.
ENTRY = [str(p.relative_to(REPO)) for p in PLAYBOOKS if p.resolve() not in IMPORTED]
# Entry playbooks that read no inventory: they run on localhost only, and the
# job they set up runs an entry playbook that has the preflight.
WITHOUT_PREFLIGHT = {
    "playbooks/awx-restart.yml": "talks to AWX's API; the job template it defines runs rolling-restart.yml",
    "playbooks/heal.yml": "the healing loop's step, on the controller; it runs rolling-restart.yml",
}


def test_the_entry_playbooks_are_found():
    assert {"site.yml", "playbooks/rolling-restart.yml", "playbooks/gate-cutover.yml"} <= set(ENTRY)
    assert not {"playbooks/preflight.yml", "playbooks/engine.yml", "playbooks/cutover.yml"} & set(ENTRY)


def _first_play(path: Path) -> tuple[Path, dict]:
    """The file and the first real play a playbook runs, following imports."""
    first = _plays(path)[0]
    if _import(first) and (path.parent / _import(first)).resolve() != PREFLIGHT:
        return _first_play((path.parent / _import(first)).resolve())
    return path, first


@pytest.mark.parametrize("playbook", [p for p in ENTRY if p not in WITHOUT_PREFLIGHT])
def test_every_entry_playbook_starts_with_the_preflight(playbook):
    path, first = _first_play(REPO / playbook)
    assert _import(first) and (path.parent / _import(first)).resolve() == PREFLIGHT, (
        f"{playbook}: its first play is {first.get('name')!r} in {path.relative_to(REPO)}, not the preflight")
    assert "when" not in first, f"{path.relative_to(REPO)} imports the preflight under a condition"


def test_the_preflight_checks_the_inventory_on_localhost_first():
    first = PREFLIGHT_PLAYS[0]
    assert first["hosts"] == "localhost" and "always" in first["tags"]


@pytest.mark.parametrize("playbook", sorted(WITHOUT_PREFLIGHT))
def test_a_playbook_without_the_preflight_touches_localhost_only(playbook):
    assert playbook in ENTRY
    plays = _plays(REPO / playbook)
    assert plays and all(p.get("hosts") == "localhost" and not _import(p) for p in plays), WITHOUT_PREFLIGHT[playbook]


# --- which playbook needs which group ---------------------------------------------------------

def _render(value, context: dict):
    """A var as Ansible would template it, for the plain cases these use."""
    if isinstance(value, dict):
        return {k: _render(v, context) for k, v in value.items()}
    if isinstance(value, str) and "{{" in value:
        text = jinja2.Environment().from_string(value).render(**context)
        return ast.literal_eval(text) if text.startswith("[") else text
    return value


def _needs(path: Path, inherited: dict | None = None):
    """vllm_fleet_preflight_needs as the preflight sees it when ``path`` runs:
    the vars of the imports on the way to it, rendered; None without a preflight."""
    for play in _plays(path):
        if not _import(play):
            continue
        context = {**(inherited or {}), **(play.get("vars") or {})}
        target = (path.parent / _import(play)).resolve()
        if target == PREFLIGHT:
            return _render(context.get("vllm_fleet_preflight_needs", {}), context)
        found = _needs(target, context)
        if found is not None:
            return found
    return None


def _targets(path: Path) -> set[str]:
    """The group kinds (consumers, gate) the plays of a playbook run on,
    following imports."""
    kinds = set()
    for play in _plays(path):
        if _import(play):
            kinds |= _targets((path.parent / _import(play)).resolve())
        for kind in ("consumers", "gate"):
            if f"vllm_fleet_{kind}_group" in str(play.get("hosts", "")):
                kinds.add(kind)
    return kinds


@pytest.mark.parametrize("playbook", [p for p in ENTRY if p not in WITHOUT_PREFLIGHT])
def test_the_needs_follow_the_plays(playbook):
    stated = _needs(REPO / playbook)
    needs = set(stated.get("groups", []))
    if needs:
        # The refusal names the playbook the operator ran.
        assert stated["playbook"] == Path(playbook).name, (playbook, stated)
    # It schedules the rolling restart on the same inventory.
    name = Path(playbook).name
    plays_on = _targets(REPO / ("playbooks/rolling-restart.yml" if name == "schedule-restart.yml" else playbook))
    assert ("consumers" in needs) == ("consumers" in plays_on), (playbook, needs, plays_on)
    # Not every playbook that has a gate play needs a gate: toward direct
    # mode there may be none to archive.
    assert needs <= plays_on, (playbook, needs, plays_on)


def test_the_needs_are_stated_where_the_preflight_is_imported():
    assert _needs(REPO / "playbooks/gate-cutover.yml") == {"playbook": "gate-cutover.yml",
                                                            "groups": ["consumers", "gate"]}
    assert _needs(REPO / "playbooks/direct-cutover.yml")["groups"] == ["consumers"]
    assert _needs(REPO / "site.yml")["groups"] == ["consumers"]
    assert _needs(REPO / "playbooks/diagnose.yml") == {}


# --- the inventories --------------------------------------------------------------------------

def _host(address=None, **hv) -> dict:
    return dict(CONNECTION, **({"vllm_fleet_address": address} if address else {}), **hv)


def _good() -> dict:
    """Two engines of two hosts (TP 2), a consumer, a gate: the lab's shape."""
    return {
        "hosts.yml": {"all": {"children": {
            "vllm_engines": {"children": {
                "engine_a": {"vars": {"vllm_fleet_engine": "engine_a"}, "hosts": {
                    "a1": _host("192.0.2.11", vllm_fleet_rank=0), "a2": _host("192.0.2.12", vllm_fleet_rank=1)}},
                "engine_b": {"vars": {"vllm_fleet_engine": "engine_b"}, "hosts": {
                    "b1": _host("192.0.2.13", vllm_fleet_rank=0), "b2": _host("192.0.2.14", vllm_fleet_rank=1)}},
            }},
            "consumers": {"hosts": {"app1": _host()}},
            "gate": {"hosts": {"gw1": _host()}},
        }}},
        "group_vars/all/fleet.yml": {"vllm_fleet_no_log": True, "vllm_fleet_mode": "direct"},
        "group_vars/vllm_engines/engine.yml": {
            "gpu_preflight_accelerator": "cpu", "vllm_fleet_gpus_per_host": 1, "vllm_server_tensor_parallel_size": 2,
            "vllm_fleet_context_tokens": 2048, "vllm_install_model_source": "host:/srv/models/tiny",
            "vllm_fleet_probe_prompt_tokens": 1024},
        "group_vars/gate/gate.yml": {"gate_service_admin_token": "rejection-test-token-not-a-secret"},
    }


def _groups(inv):
    return inv["hosts.yml"]["all"]["children"]


def _engine(inv, name):
    return _groups(inv)["vllm_engines"]["children"][name]


def _no_consumers(inv):
    del _groups(inv)["consumers"]


def _no_gate(inv):
    del _groups(inv)["gate"]


def _gate_mode_without_gate(inv):
    inv["group_vars/all/fleet.yml"]["vllm_fleet_mode"] = "gate"
    _no_gate(inv)


def _rank(host, value, engine="engine_a"):
    def change(inv):
        _engine(inv, engine)["hosts"][host]["vllm_fleet_rank"] = value
    return change


def _engine_a_settings(**settings):
    # On the engine's own group_vars: they beat group_vars/vllm_engines, which
    # vars in hosts.yml would not.
    def change(inv):
        inv["group_vars/engine_a/engine.yml"] = settings
    return change


def _rank_twice(inv):
    _engine_a_settings(vllm_server_tensor_parallel_size=3)(inv)
    _engine(inv, "engine_a")["hosts"]["a3"] = _host("192.0.2.15", vllm_fleet_rank=1)


def _bad_ranks(inv):
    _rank("a2", -1)(inv)
    _rank("b2", "one", engine="engine_b")(inv)


def _no_head(inv):
    _rank("a1", 2)(inv)


def _host_in_two_engines(inv):
    # a2 copied under engine_b as well: Ansible keeps one engine for it.
    _engine(inv, "engine_b")["hosts"]["a2"] = _host("192.0.2.12", vllm_fleet_rank=2)


def _unsafe_name(inv):
    _engine(inv, "engine_b")["vars"]["vllm_fleet_engine"] = "engine b"


def _same_head_address(inv):
    _engine(inv, "engine_b")["hosts"]["b1"]["vllm_fleet_address"] = "192.0.2.11"


def _consumer_without_address(inv):
    _groups(inv)["consumers"]["hosts"]["app2"] = {"ansible_port": 9, "ansible_connection": "ssh"}


def _gate_without_address(inv):
    # gw1 mistyped as gw2 under the gate: a new host, with nothing set.
    _groups(inv)["gate"]["hosts"] = {"gw2": None}


def _same_address_in_an_engine(inv):
    _engine(inv, "engine_a")["hosts"]["a2"]["vllm_fleet_address"] = "192.0.2.11"


def _engine_port(inv):
    _engine(inv, "engine_b")["vars"]["vllm_server_port"] = 80000


def _gate_port(inv):
    _groups(inv)["gate"]["hosts"]["gw1"]["gate_service_port"] = 0


def _gate_on_an_engine_host(inv):
    _groups(inv)["gate"]["hosts"] = {"a1": None}


def _no_engines(inv):
    del _groups(inv)["vllm_engines"]


def _as_is(inv):
    pass


def _engines_only(inv):
    _no_consumers(inv)
    _no_gate(inv)


@dataclass(frozen=True)
class Case:
    id: str
    playbook: str
    change: object
    # What the output must say: the mistake, then its fix.
    says: tuple
    # A control: the preflight's localhost play passes, and the run goes on to the hosts.
    passes: bool = False


CONSUMERS_MISSING = ("acts on the group 'consumers' (vllm_fleet_consumers_group), which the inventory lacks or"
                     " leaves empty")
CONSUMERS_FIX = "List the hosts whose applications talk to the model under it"
GATE_MODE = ("vllm_fleet_mode is gate, but the inventory has no hosts in the group 'gate'",
             "or set vllm_fleet_mode: direct")
HEAD_FIX = "Give the head (the Ray head, runs vllm serve) 0 and the other hosts 1, 2, ..., each rank once"
CONFIRM = {"playbooks/direct-cutover.yml": ("-e", "vllm_fleet_confirm=direct"),
           "playbooks/gate-cutover.yml": ("-e", "vllm_fleet_confirm=gate")}

CASES = [
    # Each mistake on site.yml.
    Case("no-engines", "site.yml", _no_engines, (
        "the inventory has no hosts in the group 'vllm_engines' (vllm_fleet_engines_group)",
        "copy inventory/example/ and edit it")),
    Case("no-consumers", "site.yml", _no_consumers, ("site.yml " + CONSUMERS_MISSING, CONSUMERS_FIX)),
    Case("gate-mode-without-gate", "site.yml", _gate_mode_without_gate, GATE_MODE),
    Case("rank-twice", "site.yml", _rank_twice, (
        "engine engine_a must have exactly one host with vllm_fleet_rank 0 and no rank twice;"
        " its ranks are [0, 1, 1]", HEAD_FIX)),
    Case("no-head", "site.yml", _no_head, ("its ranks are [1, 2]", HEAD_FIX)),
    Case("shape", "site.yml", _engine_a_settings(vllm_server_tensor_parallel_size=4), (
        "engine engine_a: 2 host(s) x 1 GPU(s) per host = 2 GPUs, but tensor parallel 4 x pipeline parallel 1 = 4",
        "Fix the engine's hosts, vllm_fleet_gpus_per_host, vllm_server_tensor_parallel_size or"
        " vllm_server_pipeline_parallel_size")),
    # One run, both kinds: every engine host is checked.
    Case("rank-negative-or-not-an-integer", "site.yml", _bad_ranks, (
        "host a2 is in 'vllm_engines' but lacks", "vllm_fleet_rank=-1",
        "host b2 is in 'vllm_engines' but lacks", "vllm_fleet_rank=one",
        "or an integer vllm_fleet_rank (0 on the head that runs the Ray head and vllm serve, 1, 2, ... on its"
        " workers)")),
    Case("host-in-two-engines", "site.yml", _host_in_two_engines, (
        "engine engine_a: a2 is listed in its group engine_a but belongs to engine engine_b",
        "list it under one engine's group only")),
    Case("unsafe-engine-name", "site.yml", _unsafe_name, (
        "engine 'engine b': vllm_fleet_engine must be letters, digits, '_' and '-', starting with a letter",
        "Rename it on the engine's group")),
    Case("same-head-address-and-port", "site.yml", _same_head_address, (
        "engine engine_b: its head b1 and the head a1 of engine engine_a are both at 192.0.2.11 with the same"
        " vllm_server_port 8000", "Engines that share a machine need their own vllm_server_port")),
    Case("consumer-without-address", "site.yml", _consumer_without_address, (
        "app2 in the group consumers has no address", "set its ansible_host")),
    Case("gate-host-without-address", "site.yml", _gate_without_address, (
        "gw2 in the group gate has no address", "check the name for a typo that made it a new host")),
    Case("gate-on-an-engine-host", "site.yml", _gate_on_an_engine_host, (
        "a1 in the group 'gate' is an engine host too", "Put the gate on a host of its own or a consumer")),
    Case("same-address-in-an-engine", "site.yml", _same_address_in_an_engine, (
        "engine engine_a: a1 and a2 have the same address 192.0.2.11", "Fix the copied address")),
    Case("engine-port", "site.yml", _engine_port, (
        "engine engine_b: vllm_server_port must be a port number (1-65535), got 80000",)),
    Case("gate-port", "site.yml", _gate_port, (
        "gw1 in the group gate: gate_service_port must be a port number (1-65535), got 0",)),
    # The groups, on the other playbooks that need them.
    Case("no-consumers", "playbooks/direct-cutover.yml", _no_consumers, (
        "direct-cutover.yml " + CONSUMERS_MISSING, CONSUMERS_FIX)),
    Case("no-consumers", "playbooks/gate-cutover.yml", _no_consumers, (
        "gate-cutover.yml " + CONSUMERS_MISSING, CONSUMERS_FIX)),
    Case("no-gate", "playbooks/gate-cutover.yml", _no_gate, (
        "gate-cutover.yml acts on the group 'gate' (vllm_fleet_gate_group), which the inventory lacks",
        "List the admission gate's host (a host of its own or a consumer) under it")),
    Case("no-consumers", "playbooks/rolling-restart.yml", _no_consumers, (
        "rolling-restart.yml " + CONSUMERS_MISSING, CONSUMERS_FIX)),
    Case("no-consumers", "playbooks/upgrade.yml", _no_consumers, (
        "upgrade.yml " + CONSUMERS_MISSING, CONSUMERS_FIX)),
    Case("no-consumers", "playbooks/schedule-restart.yml", _no_consumers, (
        "schedule-restart.yml " + CONSUMERS_MISSING, CONSUMERS_FIX)),
    # Controls.
    Case("good", "site.yml", _as_is, (), passes=True),
    Case("engines-only", "playbooks/diagnose.yml", _engines_only, (), passes=True),
]
IDS = [f"{Path(c.playbook).stem}:{c.id}" for c in CASES]


@dataclass
class Run:
    rc: int
    out: str      # stdout and stderr, whitespace collapsed
    plays: list   # the PLAY headers, in order
    recap: dict   # host: {ok, changed, unreachable, failed}


RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def _run(case: Case, folder: Path) -> Run:
    inv = _good()
    case.change(inv)
    for name, content in inv.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(yaml.safe_dump(content, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_HOST_KEY_CHECKING="False")
    r = subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", str(folder / "hosts.yml"), case.playbook,
                        *CONFIRM.get(case.playbook, ())],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    text = r.stdout + r.stderr
    return Run(r.returncode, " ".join(text.split()), re.findall(r"^PLAY \[(.*)\] \*+$", r.stdout, re.M),
               {m[0]: dict(zip(("ok", "changed", "unreachable", "failed"), map(int, m[1:])))
                for m in RECAP.findall(r.stdout)})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folders = [tmp_path_factory.mktemp(i.replace(":", "-")) for i in IDS]
    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(zip(IDS, pool.map(_run, CASES, folders)))


def test_the_cases_cover_every_need():
    covered = {(Path(c.playbook).name, c.id) for c in CASES}
    needs = {Path(p).name: _needs(REPO / p).get("groups", []) for p in ENTRY if p not in WITHOUT_PREFLIGHT}
    missing = [(playbook, f"no-{group}") for playbook, groups in needs.items() for group in groups
               if (playbook, f"no-{group}") not in covered]
    assert missing == []


def test_the_cases_are_distinct():
    assert len(set(IDS)) == len(IDS)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_wrong_inventory_is_refused_before_any_host_is_contacted(runs, case):
    run = runs[f"{Path(case.playbook).stem}:{case.id}"]
    assert run.rc != 0, run.out[-3000:]
    if case.passes:
        # The localhost play passed, and the next play reached for the hosts.
        assert run.recap["localhost"]["failed"] == 0, run.out[-3000:]
        assert run.plays[:2] == [LOCAL_PLAY, PREFLIGHT_PLAYS[1]["name"]], run.plays
        assert "UNREACHABLE" in run.out and "Nothing was changed: engine host(s)" in run.out, run.out[-3000:]
        return
    for said in case.says:
        assert said in run.out, f"{said!r} not in:\n{run.out[-3000:]}"
    assert "Nothing was changed" in run.out
    assert run.plays == [LOCAL_PLAY], run.plays
    assert list(run.recap) == ["localhost"] and run.recap["localhost"]["failed"] == 1, run.recap
    assert "UNREACHABLE" not in run.out
