"""The one record of each engine, built from the inventory on the controller:
who the engine is (its hosts, ranks and head), where it answers, how it is
shaped, and ``problems`` (empty when the inventory describes a valid engine);
with the checks of the consumer and gate hosts and the gate's URL and upstreams
built from the records. ``plugins/filter/fleet.py`` registers these as filters
(``engine_records``, ``engine_heads``, ``host_problems``...) and raises
:class:`RecordError` as AnsibleFilterError.

An engine (a TP group) is the set of hosts in the engines group that share a
``vllm_fleet_engine`` name; its rank-0 host is the head (Ray head, ``vllm
serve``). Numbers past an int's or a float's range are read and quoted without
raising by ``shared/numeric.py``: a knob read as a number is a finite number in
its range, or a problem that names it.

No AnsibleModule; PyYAML (the controller's) reads the toolkit's defaults file.
"""
from __future__ import annotations

import ipaddress
import re
from functools import lru_cache
from pathlib import Path

from ansible.module_utils.fleet import hub_model as _hub_model  # a hub model's folder and its problems
from ansible.module_utils.fleet.commands import command
from ansible.module_utils.shared.numeric import finite_float, shown, text

# The toolkit's defaults, written once. Another host's variables (hostvars)
# never include a role's defaults, so the record reads them from the file.
DEFAULTS_FILE = Path(__file__).resolve().parents[3] / "roles" / "vllm_fleet_defaults" / "defaults" / "main.yml"

# Engine-wide settings: every host of an engine must agree on them.
ENGINE_KEYS = (
    "vllm_server_port", "vllm_server_unit", "vllm_server_served_model_name", "vllm_server_master_port",
    "vllm_server_backend", "vllm_server_tensor_parallel_size", "vllm_server_pipeline_parallel_size",
    "vllm_fleet_gpus_per_host", "vllm_fleet_context_tokens", "ray_cluster_unit", "ray_cluster_port",
    "vllm_install_venv", "vllm_install_user", "vllm_install_home", "vllm_install_model_source",
    "vllm_install_model_dir", "vllm_install_model_revision", "vllm_fleet_probe_prompt_tokens",
    "vllm_fleet_prefill_threshold_floor", "vllm_fleet_prefill_timed",
)


# Knobs that were replaced: an inventory that still sets one is refused with
# the new name, so a quantity never has two knobs.
RETIRED = {
    "vllm_server_max_model_len": "vllm_fleet_context_tokens (the one context knob; vLLM gets it as --max-model-len)",
    "ray_cluster_num_gpus": "vllm_fleet_gpus_per_host (Ray is told each host's GPUs from it)",
    "vllm_fleet_min_sessions": "vllm_verify_min_sessions",
    "vllm_server_model": "vllm_install_model_source (the server runs the model vllm_install stages)",
    "vllm_server_node_ip": "vllm_fleet_address",
    "ray_cluster_node_ip": "vllm_fleet_address",
    "gpu_preflight_address": "vllm_fleet_address",
    "vllm_server_socket_ifname": "vllm_fleet_socket_ifname",
    "ray_cluster_socket_ifname": "vllm_fleet_socket_ifname",
    "gpu_preflight_interface": "vllm_fleet_socket_ifname",
    "vllm_server_probe_timeout": "vllm_verify_generate_timeout_s (a token slower than that is a wedged engine)",
}


# An engine's name goes into its units, the gate's upstreams (and their
# metrics labels), the restart plan and the reports.
ENGINE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,62}")


# What a head binds and installs on its machine, by backend: two engines
# whose heads share an address must differ in each of these.
HEAD_FOOTPRINT = {
    "ray": ("vllm_server_port", "vllm_server_unit", "ray_cluster_port", "ray_cluster_unit"),
    "mp": ("vllm_server_port", "vllm_server_unit", "vllm_server_master_port"),
}

class RecordError(ValueError):
    """An inventory no engine can be built from, or a gate with nothing to route to;
    its text is the filter's failure message."""


@lru_cache(maxsize=1)
def fleet_defaults() -> dict:
    """The plain defaults of roles/vllm_fleet_defaults."""
    import yaml

    return yaml.safe_load(DEFAULTS_FILE.read_text()) or {}


def _get(hv, key: str):
    """A host's own value of ``key`` (inventory, facts, set_fact), or the
    toolkit's default."""
    try:
        value = hv.get(key)
    except Exception:  # noqa: BLE001  (an undefined variable inside the value: treat as unset)
        value = None
    return fleet_defaults().get(key) if value is None else value


def _set(hv, key: str) -> bool:
    """Whether a host sets ``key`` at all (to anything, even an unresolvable
    template)."""
    try:
        return hv.get(key) is not None
    except Exception:  # noqa: BLE001  (an undefined variable inside the value: it is set)
        return True


def _address(hv: dict, name: str) -> str:
    """The host's engine-link address: Ray's node IP, VLLM_HOST_IP, NCCL's and Gloo's."""
    return str(hv.get("vllm_fleet_address") or hv.get("ansible_host") or name)


def _service_address(hv: dict, name: str) -> str:
    """The host's service address: where the API answers the consumers, the
    gate and the operator. The link address when the site has one network."""
    try:
        value = hv.get("vllm_fleet_service_address")
    except Exception:  # noqa: BLE001  (an undefined variable inside the value: treat as unset)
        value = None
    return text(value) if value else _address(hv, name)


# The largest count or port a knob holds: a bound, so int() never meets
# 4,300 digits and str() never raises on what a record holds.
MAX_INTEGER = 2 ** 63 - 1


def _rank(value):
    """A non-negative integer rank, or None: int() alone would turn 1.5 into
    1 and True into 1. The preflight applies it through ``engine_rank``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value <= MAX_INTEGER else None
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,19}", value):
        return int(value) if int(value) <= MAX_INTEGER else None
    return None


def _positive(value):
    """A positive integer from an int or a digit string, else None."""
    rank = _rank(value)
    return rank if rank else None


def _port_problem(key: str, value):
    """Why ``value`` of ``key`` is no port number (1-65535), or None."""
    if 0 < (_positive(value) or 0) < 65536:
        return None
    return f"{key} must be a port number (1-65535), got {shown(value)}"


def engine_rank(value):
    """``value`` as a rank (0 for the head, 1, 2, ... for the other hosts), or
    None when it is none: not an integer, or negative."""
    return _rank(value)


def engine_peers(hosts, hostvars, engine):
    """Hosts of ``engine`` as a rank-sorted list of {name, rank, address,
    service_address}: ``address`` on the engine's link, ``service_address``
    where consumers reach the host (the same on a one-network site)."""
    peers = []
    for name in hosts or []:
        hv = hostvars[name]
        if str(hv.get("vllm_fleet_engine", "")) != str(engine):
            continue
        rank = _rank(hv.get("vllm_fleet_rank"))
        if rank is None:
            raise RecordError(
                f"host {name} of engine {engine} has no integer vllm_fleet_rank"
                f" (got {shown(hv.get('vllm_fleet_rank'))}); give the head 0 and the other hosts 1, 2, ..."
            )
        peers.append({"name": name, "rank": rank, "address": _address(hv, name),
                      "service_address": _service_address(hv, name)})
    peers.sort(key=lambda p: p["rank"])
    return peers


def engine_names(hosts, hostvars):
    """The distinct engine names among ``hosts``, in inventory order."""
    seen = []
    for name in hosts or []:
        engine = hostvars[name].get("vllm_fleet_engine")
        if engine is not None and engine not in seen:
            seen.append(engine)
    return seen


def engine_heads(hosts, hostvars):
    """One {engine, name, rank, address} per engine: its rank-0 host."""
    heads = []
    for engine in engine_names(hosts, hostvars):
        peers = engine_peers(hosts, hostvars, engine)
        if not peers or peers[0]["rank"] != 0:
            raise RecordError(f"engine {engine} has no host with vllm_fleet_rank 0")
        heads.append(dict(peers[0], engine=engine))
    return heads


def model_path(source, model_dir, revision="") -> str:
    """Where the model lives on the host (vLLM's --model): the path of a
    ``host:`` source; for a ``hub:`` source its own folder per repo and
    revision, ``<model_dir>/<org>--<name>/<revision>``; else (``controller:``)
    the directory vllm_install copies it to."""
    source = text(source or "")
    if source.startswith("host:"):
        return source[5:]
    if source.startswith("hub:"):
        return _hub_model.model_folder(text(model_dir), source[4:], text(revision or ""))
    return text(model_dir)


def _shape_problems(name: str, hosts: int, tp, pp, gpus) -> list[str]:
    problems = []
    for key, value in (("vllm_server_tensor_parallel_size", tp), ("vllm_server_pipeline_parallel_size", pp),
                       ("vllm_fleet_gpus_per_host", gpus)):
        if _positive(value) is None:
            problems.append(f"engine {name}: {key} must be a positive integer, got {shown(value)}")
    if problems:
        return problems
    tp, pp, gpus = int(tp), int(pp), int(gpus)
    if hosts * gpus != tp * pp:
        problems.append(
            f"engine {name}: {hosts} host(s) x {gpus} GPU(s) per host = {hosts * gpus} GPUs, but tensor parallel"
            f" {tp} x pipeline parallel {pp} = {tp * pp}; they must be equal. Fix the engine's hosts,"
            " vllm_fleet_gpus_per_host, vllm_server_tensor_parallel_size or vllm_server_pipeline_parallel_size")
    return problems


def engine_record(hosts, hostvars, engine) -> dict:
    """The record of one engine: who it is, where it answers, how it is shaped,
    and ``problems`` (empty when the inventory describes a valid engine)."""
    peers = engine_peers(hosts, hostvars, engine)
    heads = [p for p in peers if p["rank"] == 0]
    problems = _identity_problems(engine, peers, heads)
    problems += _membership_problems(hosts, hostvars, engine, peers)
    head = heads[0] if heads else peers[0]
    values = {key: _get(hostvars[head["name"]], key) for key in ENGINE_KEYS}
    problems += _agreement_problems(hostvars, engine, peers, head, values)
    settings, setting_problems = _settings(engine, values, len(peers))
    problems += setting_problems
    if heads:
        problems += _shared_head_problems(hosts, hostvars, engine, head, values)
    source = text(values["vllm_install_model_source"] or "")
    if source.startswith("hub:"):
        problems += [f"engine {engine}: {p}" for p in _hub_model.source_problems(source[4:],
                                                                              values["vllm_install_model_revision"])]
    return _record(engine, head, peers, values, settings, problems)


def _identity_problems(engine, peers, heads) -> list[str]:
    """One head and no rank twice; a name the units, the gate and the reports can carry."""
    problems = []
    ranks = [p["rank"] for p in peers]
    if len(heads) != 1 or len(set(ranks)) != len(ranks):
        problems.append(f"engine {engine} must have exactly one host with vllm_fleet_rank 0 and no rank twice;"
                        f" its ranks are {sorted(ranks)}. Give the head (the Ray head, runs vllm serve) 0 and"
                        " the other hosts 1, 2, ..., each rank once")
    if not ENGINE_NAME.fullmatch(str(engine)):
        problems.append(f"engine {str(engine)!r}: vllm_fleet_engine must be letters, digits, '_' and '-',"
                        " starting with a letter (at most 63): it names the engine's units, its upstream at the"
                        " gate and its lines in the reports. Rename it on the engine's group")
    return problems


def _agreement_problems(hostvars, engine, peers, head, values) -> list[str]:
    """Each host against the head's engine-wide ``values``, and each retired knob a host still sets."""
    problems = []
    for peer in peers:
        phv = hostvars[peer["name"]]
        for key in ENGINE_KEYS:
            if text(_get(phv, key)) != text(values[key]):
                problems.append(f"engine {engine}: {key} is {shown(_get(phv, key))} on {peer['name']} but"
                                f" {shown(values[key])} on the head {head['name']}; set it on the engine's group")
        for old, new in RETIRED.items():
            if _set(phv, old):
                problems.append(f"{peer['name']} sets {old}, which is gone: use {new}")
    return problems


def _settings(engine, values, host_count) -> tuple[dict, list[str]]:
    """The engine's backend, shape, context, probe length, prefill floor and ports read from
    its engine-wide ``values``: ``({backend, context, probe_tokens, floor, timed}, problems)``."""
    problems = []
    backend = text(values["vllm_server_backend"])
    if backend not in ("ray", "mp"):
        problems.append(f"engine {engine}: vllm_server_backend must be ray or mp, got {shown(backend)}")
    problems += _shape_problems(engine, host_count, values["vllm_server_tensor_parallel_size"],
                                values["vllm_server_pipeline_parallel_size"], values["vllm_fleet_gpus_per_host"])
    context = _positive(values["vllm_fleet_context_tokens"])
    if context is None:
        problems.append(f"engine {engine}: vllm_fleet_context_tokens must be a positive integer,"
                        f" got {shown(values['vllm_fleet_context_tokens'])}")
    # The probe's prompt length, at most half the context (a probe must fit beside nothing else).
    probe_tokens = _positive(values["vllm_fleet_probe_prompt_tokens"])
    if probe_tokens is not None and context is not None:
        probe_tokens = min(probe_tokens, context // 2)
    if probe_tokens is None or probe_tokens < 16:
        problems.append(f"engine {engine}: vllm_fleet_probe_prompt_tokens must be an integer of at least 16"
                        f" (capped at half of vllm_fleet_context_tokens, {context}),"
                        f" got {shown(values['vllm_fleet_probe_prompt_tokens'])}")
    floor = finite_float(values["vllm_fleet_prefill_threshold_floor"])
    if floor is None or not 1.0 <= floor <= 10.0:
        problems.append(f"engine {engine}: vllm_fleet_prefill_threshold_floor must be a number from 1.0 to 10,"
                        f" got {shown(values['vllm_fleet_prefill_threshold_floor'])}")
    timed = values["vllm_fleet_prefill_timed"]
    if isinstance(timed, str) and timed.strip().lower() in ("true", "false"):
        timed = timed.strip().lower() == "true"  # -e vllm_fleet_prefill_timed=false
    if not isinstance(timed, bool):
        problems.append(f"engine {engine}: vllm_fleet_prefill_timed must be true or false, got {shown(timed)}")
    for key in ("vllm_server_port", "ray_cluster_port", "vllm_server_master_port"):
        if problem := _port_problem(key, values[key]):
            problems.append(f"engine {engine}: {problem}")
    return {"backend": backend, "context": context, "probe_tokens": probe_tokens, "floor": floor,
            "timed": timed is True}, problems


def _record(engine, head, peers, values, settings, problems) -> dict:
    """The record's fields, from the head, the peers, the engine-wide values and the checked settings."""
    port = _positive(values["vllm_server_port"])
    url = f"http://{head['service_address']}:{port or text(values['vllm_server_port'])}"
    venv = text(values["vllm_install_venv"])
    source = text(values["vllm_install_model_source"] or "")
    model = model_path(source, values["vllm_install_model_dir"], values["vllm_install_model_revision"])
    tp, pp, gpus = (values["vllm_server_tensor_parallel_size"], values["vllm_server_pipeline_parallel_size"],
                    values["vllm_fleet_gpus_per_host"])
    return {
        "name": str(engine),
        "head": head["name"],
        "head_address": head["address"],
        "service_address": head["service_address"],
        "peers": peers,
        "hosts": [p["name"] for p in peers],
        "port": port,
        "url": url,
        "api_url": url + "/v1",
        "unit": text(values["vllm_server_unit"]),
        "ray_unit": text(values["ray_cluster_unit"]),
        "ray_port": _positive(values["ray_cluster_port"]),
        "master_port": _positive(values["vllm_server_master_port"]),
        "backend": settings["backend"],
        "venv": venv,
        "vllm_bin": venv.rstrip("/") + "/bin/vllm",
        # The engine's Python: the interpreter of the modules that import its packages.
        "python": venv.rstrip("/") + "/bin/python",
        "user": text(values["vllm_install_user"]),
        "home": text(values["vllm_install_home"]),
        "model": text(model),
        "served_model_name": text(values["vllm_server_served_model_name"]),
        "context_tokens": settings["context"],
        "tensor_parallel_size": _positive(tp),
        "pipeline_parallel_size": _positive(pp),
        "gpus_per_host": _positive(gpus),
        "world_size": (_positive(tp) or 0) * (_positive(pp) or 0),
        "probe_prompt_tokens": settings["probe_tokens"],
        "prefill_threshold_floor": settings["floor"],
        # The head's API server times each request (--enable-per-request-metrics): the probe's
        # samples under load are then the engine's own figures (prefill/probe.py).
        "prefill_timed": settings["timed"],
        "problems": problems,
    }


def _membership_problems(hosts, hostvars, engine, peers) -> list[str]:
    """Two hosts of the engine on one address (one machine for two ranks),
    and a host listed in the engine's group that another group gave to
    another engine: Ansible keeps one vllm_fleet_engine per host, so the
    engine would run short of it. The second needs the group named after
    the engine, as inventory/example names it."""
    problems = []
    by_address = {}
    for peer in peers:
        by_address.setdefault(peer["address"], []).append(peer["name"])
    for address, names in by_address.items():
        if len(names) > 1:
            problems.append(f"engine {engine}: {' and '.join(names)} have the same address {address}"
                            " (vllm_fleet_address, else ansible_host), but each rank needs a machine of its own."
                            " Fix the copied address")
    for name in hosts or []:
        hv = hostvars[name]
        other = hv.get("vllm_fleet_engine")
        if str(engine) in (hv.get("group_names") or []) and str(other) != str(engine):
            problems.append(f"engine {engine}: {name} is listed in its group {engine} but belongs to engine {other}"
                            " (another group sets its vllm_fleet_engine). A host serves one engine: list it under"
                            " one engine's group only")
    return problems


def _footprint(values) -> dict:
    """What a head binds and installs on its machine, from its engine-wide
    values: {key: value as text}."""
    keys = HEAD_FOOTPRINT.get(text(values["vllm_server_backend"]), HEAD_FOOTPRINT["ray"])
    return {key: text(values[key]) for key in keys}


def _shared_head_problems(hosts, hostvars, engine, head, values) -> list[str]:
    """Two engines whose heads share an address (one machine) and a port or a
    unit: the second to start would find the port taken, or overwrite the
    first one's unit. Said once, on the later engine in inventory order."""
    problems = []
    mine = _footprint(values)
    for other in engine_names(hosts, hostvars):
        if str(other) == str(engine):
            break
        try:
            other_head = next((p for p in engine_peers(hosts, hostvars, other) if p["rank"] == 0), None)
        except RecordError:  # that engine's own record says what is wrong with it
            continue
        if other_head is None or other_head["address"] != head["address"]:
            continue
        theirs = _footprint({key: _get(hostvars[other_head["name"]], key) for key in ENGINE_KEYS})
        same = [f"{key} {value}" for key, value in mine.items() if theirs.get(key) == value]
        if same:
            problems.append(
                f"engine {engine}: its head {head['name']} and the head {other_head['name']} of engine {other}"
                f" are both at {head['address']} with the same {', '.join(same)}. Engines that share a machine"
                f" need their own {', '.join(mine)}: set them on one engine's group, or fix the copied address")
    return problems


def engine_records(hosts, hostvars):
    """One record per engine among ``hosts``, in inventory order."""
    # Each engine's checks read every host; Ansible's hostvars builds a
    # host's variables anew on each lookup, so look each host up once.
    hostvars = {name: hostvars[name] for name in hosts or []}
    return [engine_record(hosts, hostvars, engine) for engine in engine_names(hosts, hostvars)]


def _named_by_address(name: str) -> bool:
    """Whether an inventory name is itself an address: an IP address, a
    dotted DNS name, or localhost."""
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return "." in name or name == "localhost"


def host_problems(hosts, hostvars, group, ports=()):
    """What is wrong with the consumer or gate ``hosts`` (of the group named
    ``group``): a host with no address of its own (a name listed by a typo has
    none, and a short name rarely resolves from the other hosts), and each of
    ``ports`` (keys) that is no port number."""
    problems = []
    for name in hosts or []:
        hv = hostvars[name]
        if not (hv.get("vllm_fleet_service_address") or hv.get("vllm_fleet_address") or hv.get("ansible_host")) \
                and not _named_by_address(str(name)):
            problems.append(f"{name} in the group {group} has no address: set its ansible_host (and"
                            " vllm_fleet_service_address if the others reach it on another network), or check the"
                            " name for a typo that made it a new host")
        for key in ports or ():
            if problem := _port_problem(key, _get(hv, key)):
                problems.append(f"{name} in the group {group}: {problem}")
    return problems


def gate_url(hosts, hostvars) -> str:
    """The gate's base URL (no /v1) on the first of ``hosts``; '' for none."""
    if not hosts:
        return ""
    name = list(hosts)[0]
    hv = hostvars[name]
    host = hv.get("gate_service_listen_host")
    if not host or str(host) in ("0.0.0.0", "::"):
        host = _service_address(hv, name)
    return f"http://{host}:{_get(hv, 'gate_service_port')}"


def gate_upstreams(pairs, kv_overrides=None, inventory_arg=""):
    """The gate's upstreams from (engine record, vllm_kv_cache_info result)
    pairs: each engine's URL, its KV pool (an override by engine name wins)
    and the context it serves as logged at boot, the figure vllm_verify
    checks against the inventory. ``inventory_arg`` (vllm_fleet_inventory_arg)
    goes into the command a failure names."""
    upstreams = []
    for record, kv in pairs or []:
        kv = kv or {}
        tokens = (kv_overrides or {}).get(record["name"], kv.get("kv_cache_tokens"))
        if tokens is None:
            raise RecordError(
                f"engine {record['name']}: no KV pool in the boot log of {record['unit']} on {record['head']}"
                f" ({kv.get('msg') or 'not found'});"
                f" start the engine ({command(text(inventory_arg or ''), 'site.yml')}),"
                f" or set"
                f" gate_service_kv_cache_tokens for it")
        context = kv.get("concurrency_tokens") or record.get("context_tokens")
        if _positive(tokens) is None or _positive(context) is None:
            raise RecordError(
                f"engine {record['name']}: the gate needs a positive KV pool and context, got"
                f" kv_cache_tokens {shown(tokens)} and context {shown(context)}; check gate_service_kv_cache_tokens"
                f" and the engine's boot log")
        upstreams.append({
            "name": record["name"],
            "url": record["url"],
            "kv_cache_tokens": int(tokens),
            "max_model_len": int(context),
        })
    return upstreams
