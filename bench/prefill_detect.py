#!/usr/bin/env python3
"""The prefill probe's calibration on any site: healthy noise, false positives, and detection on the lab.

Four steps, each a subcommand (figures and commands in docs/benchmarks.md and docs/diagnose.md):

  show     Prints the engine the other steps would probe (URL, model, prompt
           length, floor, where the API key comes from) and stops: sends
           nothing.
  record   N healthy probe runs against the engine. Each run is what one
           `vllm_prefill_probe` call does: a fresh connection, one warm-up,
           one group of 4 samples. Writes the groups as JSON (the fixture
           tests/fixtures/prefill/lab-healthy-groups.json is one such file).
  replay   Replays every (baseline of 2 groups, other group as probe) pair
           of a recorded file through prefill.decide, at the threshold floor
           given and at each candidate floor; prints the false "degraded"
           rate and the smallest floor with none. Needs no engine.
  detect   The lab only: records a baseline on the healthy engine, sets the
           lab's slow-prefill knob (lab/lab.sh) on the engine's hosts at
           --quota percent, runs --runs probes and counts "degraded"; then
           takes the knob off.

Which engine: the site's inventory, `-i inventory/<site>` (`--engine NAME`
when it has several), read as the playbooks read it: Ansible loads it
(group_vars, vault files, templates) and plugins/filter/fleet.py's
engine_records (plugins/module_utils/fleet/record.py) builds the engine's record, which gives the URL, the served
model name, the probe's prompt length and floor; the API key is the
inventory's vllm_server_api_key, resolved by Ansible and never printed.
Vault-encrypted values need the vault password as for ansible-playbook
(--vault-password-file, --vault-id, --ask-vault-pass, or ansible.cfg's
vault_password_file / $ANSIBLE_VAULT_PASSWORD_FILE). --url, --model, --tokens and
--api-key-env VAR (the key from $VAR) override the record. There is no
default site, so that a site's run never probes the lab's addresses with the
lab's key: the lab is `-i inventory/lab`; without -i, give --url, --model
and --tokens, and the key, if any, with --api-key-env.

It only reads the engine and sends it one-token completions (record on a
quiet engine: a busy host looks slow). detect also sets the lab's knob: a
lab job, never run beside another.

    .venv/bin/python bench/prefill_detect.py show -i inventory/<site>
    .venv/bin/python bench/prefill_detect.py record -i inventory/<site> --runs 150 --out healthy.json
    .venv/bin/python bench/prefill_detect.py replay healthy.json
    .venv/bin/python bench/prefill_detect.py detect -i inventory/lab --quota 60 --runs 30 --floor 1.5
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import runpy
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The toolkit's Ansible settings (vault password file, collections) wherever it is run from.
os.environ.setdefault("ANSIBLE_CONFIG", str(REPO / "ansible.cfg"))
# The project's module_utils, as Ansible loads them, and the benchmarks' own logic (bench/lib/).
runpy.run_path(str(REPO / "plugins" / "module_utils_path.py"))
if str(REPO / "bench" / "lib") not in sys.path:
    sys.path.insert(0, str(REPO / "bench" / "lib"))
from ansible.module_utils.fleet.record import fleet_defaults  # noqa: E402
from ansible.module_utils.prefill import decision as prefill  # noqa: E402
from ansible.module_utils.prefill.client import EngineClient  # noqa: E402
from ansible.module_utils.prefill.probe import probe, record  # noqa: E402
from prefill_replay import false_positive_bound, replay  # noqa: E402

# The inventories of the lab (lab/lab.sh makes their hosts); detect's knob exists only there.
LAB_INVENTORIES = ("lab", "lab-two-engines")
# Run from cron or a pipe, a vault prompt would hang: only --ask-vault-pass prompts.
VAULT_HINT = ("give the vault password as to ansible-playbook: --vault-password-file FILE, --vault-id ID@FILE or"
              " --ask-vault-pass (or vault_password_file in ansible.cfg / ANSIBLE_VAULT_PASSWORD_FILE)")


class TargetError(Exception):
    """The engine to probe cannot be worked out; the message says what to give."""


@dataclass(frozen=True)
class Target:
    """The engine one run probes. ``api_key`` never appears in repr or in ``describe``."""
    url: str
    model: str
    tokens: int
    floor: float
    api_key: str | None = field(default=None, repr=False)
    key_source: str = "none"
    engine: str | None = None
    hosts: tuple = ()
    inventory: str | None = None

    def describe(self) -> str:
        where = f"engine {self.engine} of {self.inventory}" if self.inventory else "an engine named by --url"
        return (f"{where}: {self.url}, model {self.model}, {self.tokens}-token prompts, floor {self.floor:g};"
                f" API key: {self.key_source}")


def _fleet():
    """plugins/filter/fleet.py, loaded by path as the style asks (a filter plugin is no package)."""
    spec = importlib.util.spec_from_file_location("vllm_fleet_filter_fleet", REPO / "plugins" / "filter" / "fleet.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ansible(vault_ids=(), vault_password_files=(), ask_vault_pass=False):
    """A DataLoader with the vault secrets ansible-playbook would have, and Ansible's plugins ready."""
    from ansible import constants as C
    from ansible.cli import CLI
    from ansible.parsing.dataloader import DataLoader
    from ansible.parsing.vault import VaultSecretsContext
    from ansible.plugins.loader import init_plugin_loader
    from ansible.utils.collection_loader import AnsibleCollectionConfig

    if AnsibleCollectionConfig.collection_finder is None:
        init_plugin_loader()
    loader = DataLoader()
    secrets = CLI.setup_vault_secrets(
        loader, vault_ids=list(C.DEFAULT_VAULT_IDENTITY_LIST) + list(vault_ids),
        vault_password_files=list(vault_password_files), ask_vault_pass=ask_vault_pass, auto_prompt=False,
        # Inline !vault values decrypt through this process-wide context; it can be set once.
        initialize_context=VaultSecretsContext.current(optional=True) is None)
    loader.set_vault_secrets(secrets)
    return loader


class _HostVars:
    """One host's variables as a play's ``hostvars[host]`` gives them: templated when read."""

    def __init__(self, loader, variables: dict):
        from ansible.template import Templar

        self._vars = variables
        self._templar = Templar(loader=loader, variables=variables)

    def get(self, key, default=None):
        return self[key] if key in self._vars else default

    def __getitem__(self, key):
        return self._templar.template(self._vars[key])

    def __contains__(self, key):
        return key in self._vars


def read_inventory(inventory: str, engine: str | None = None, vault_ids=(), vault_password_files=(),
                   ask_vault_pass: bool = False) -> tuple[dict, str | None]:
    """The record of ``engine`` (the only one when None) in ``inventory``, and the
    API key its clients send (its head's vllm_server_api_key; None for none)."""
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.vars.manager import VariableManager

    fleet = _fleet()
    if not Path(inventory).exists():
        raise TargetError(f"no inventory at {inventory}: give the site's, -i inventory/<site>"
                          " (the lab: -i inventory/lab)")
    try:
        loader = _ansible(vault_ids, vault_password_files, ask_vault_pass)
        manager = InventoryManager(loader=loader, sources=[inventory])
        variables = VariableManager(loader=loader, inventory=manager)
        group = fleet_defaults()["vllm_fleet_engines_group"]
        hosts = [h.name for h in manager.get_hosts(group)] if group in manager.groups else []
        hostvars = {h: _HostVars(loader, variables.get_vars(host=manager.get_host(h))) for h in hosts}
        records = fleet.engine_records(hosts, hostvars)
    except AnsibleError as e:
        said = (str(e).splitlines() or [""])[0].rstrip(".")
        raise TargetError(f"Ansible could not read the inventory {inventory} ({type(e).__name__}: {said})"
                          + (f": {VAULT_HINT}" if "vault" in said.lower() else "")) from None
    names = [r["name"] for r in records]
    if not records:
        raise TargetError(f"the inventory {inventory} has no engine: no host of its {group} group sets"
                          " vllm_fleet_engine (inventory/example/hosts.yml shows how)")
    if engine is None and len(records) > 1:
        raise TargetError(f"the inventory {inventory} has {len(records)} engines ({', '.join(names)}):"
                          f" name one, --engine {names[0]}")
    chosen = next((r for r in records if engine is None or r["name"] == engine), None)
    if chosen is None:
        raise TargetError(f"the inventory {inventory} has no engine {engine!r}; it has {', '.join(names)}")
    if chosen["problems"]:
        raise TargetError(f"the inventory {inventory} describes engine {chosen['name']} wrongly:"
                          f" {'; '.join(chosen['problems'])} (ansible-playbook -i {inventory}"
                          " playbooks/preflight.yml says the same)")
    head = hostvars[chosen["head"]]
    try:
        key = head["vllm_server_api_key"] if "vllm_server_api_key" in head \
            else fleet_defaults().get("vllm_server_api_key")
    except AnsibleError as e:
        # The error names the template and the variable it lacks, never a resolved value.
        raise TargetError(f"the inventory {inventory} sets vllm_server_api_key for {chosen['head']}, but Ansible"
                          f" cannot resolve it ({type(e).__name__}): for a vault-encrypted value, {VAULT_HINT};"
                          " for a template, define what it names (a vault file beside it?)") from None
    return chosen, (str(key) if key else None)


def resolve(args: argparse.Namespace, environ=os.environ) -> Target:
    """The engine to probe: the inventory's record, with the command line's overrides."""
    rec, key, source = {}, None, "none"
    if args.inventory:
        rec, key = read_inventory(args.inventory, args.engine, args.vault_id, args.vault_password_file,
                                  args.ask_vault_pass)
        source = (f"the inventory's vllm_server_api_key (host {rec['head']})" if key
                  else "none (the inventory sets none)")
    elif args.engine:
        raise TargetError("--engine names an engine of an inventory: give it, -i inventory/<site>")
    else:
        missing = [opt for opt, value in (("--url", args.url), ("--model", args.model), ("--tokens", args.tokens))
                   if value is None]
        if missing:
            raise TargetError("which engine? Give the site's inventory, -i inventory/<site> (the lab:"
                              f" -i inventory/lab), or {', '.join(missing)} (and --api-key-env VAR for its key)")
    if args.api_key_env:
        key = environ.get(args.api_key_env) or None
        if key is None:
            raise TargetError(f"--api-key-env {args.api_key_env}: ${args.api_key_env} is not set or empty;"
                              " export it, or leave the option out to use the inventory's key")
        source = f"${args.api_key_env}"
    url = args.url or rec.get("url")
    try:
        EngineClient(url).close()  # its own check of the address; sends nothing
    except prefill.PrefillError as e:
        raise TargetError(f"{'--url' if args.url else 'the record'}: {e}") from None
    tokens = args.tokens if args.tokens is not None else rec.get("probe_prompt_tokens")
    if tokens < 16:
        raise TargetError(f"--tokens {tokens}: a prompt of at least 16 tokens is needed to time a prefill")
    floor = getattr(args, "floor", None)
    return Target(url=url, model=args.model or rec.get("served_model_name"), tokens=tokens,
                  floor=floor if floor is not None else rec.get("prefill_threshold_floor") or prefill.FLOOR,
                  api_key=key, key_source=source, engine=rec.get("name"), hosts=tuple(rec.get("hosts", ())),
                  inventory=args.inventory)


def _client(target: Target) -> EngineClient:
    return EngineClient(target.url, api_key=target.api_key)


def one_group(target: Target) -> list[float]:
    with _client(target) as client:
        prompt, _ = client.build_prompt(target.model, target.tokens)
        client.sample(target.model, prompt)
        return [client.sample(target.model, prompt)[0].seconds_per_token for _ in range(prefill.GROUP_SIZE)]


def cmd_record(args: argparse.Namespace, target: Target) -> None:
    with _client(target) as client:
        version = client.version()
    groups, started = [], time.monotonic()
    for i in range(args.runs):
        groups.append(one_group(target))
        s = prefill.statistic(groups[-1])
        print(f"run {i + 1:3d}/{args.runs}: statistic {s * 1e6:7.2f} us/token", flush=True)
        time.sleep(args.gap)
    data = {"source": "bench/prefill_detect.py " + shlex.join(args.argv),
            "engine": f"{target.engine or target.url} ({target.url}, model {target.model}, vLLM {version})",
            "recorded_at": datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat(),
            "unit": "seconds_per_token", "prompt_tokens": target.tokens, "groups": groups}
    Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
    stats = [prefill.statistic(g) for g in groups]
    med = statistics.median(stats)
    print(f"{len(groups)} groups in {time.monotonic() - started:.0f} s; statistic median {med * 1e6:.2f} us/token, "
          f"min {min(stats) / med:.3f}x, max {max(stats) / med:.3f}x of the median -> {args.out}")


def cmd_replay(args: argparse.Namespace) -> None:
    groups = json.loads(Path(args.file).read_text())["groups"]
    print(f"{len(groups)} healthy groups; 95% bound on the FP rate with 0 false calls in them: "
          f"{false_positive_bound(len(groups)):.2%}")
    for floor in sorted({args.floor, *args.floors}):
        for adjacent in (True, False) if args.all_pairs else (True,):
            r = replay(groups, floor=floor, adjacent=adjacent)
            print(f"floor {floor:4.2f}, {'adjacent' if adjacent else 'any two'} groups as the baseline: "
                  f"{r.false_degraded:6d} false degraded in {r.n} pairs ({r.rate:.2%}), "
                  f"{r.inconclusive} inconclusive", flush=True)


def lab_only(target: Target) -> None:
    """detect's knob is lab/lab.sh's: refuse any other inventory before touching anything."""
    inventory = Path(target.inventory or "").resolve()
    inventory = inventory.parent if inventory.is_file() else inventory  # inventory/lab/hosts.yml
    if not target.inventory or inventory.parent != (REPO / "inventory").resolve() \
            or inventory.name not in LAB_INVENTORIES:
        raise TargetError("detect sets the lab's slow-prefill knob (lab/lab.sh fault slow-prefill), which only"
                          " the lab has: give -i inventory/lab. On a site, record and replay measure the noise")


def knob(hosts, quota: int | None) -> None:
    for host in hosts:
        argv = ["lab/lab.sh", "fault", "slow-prefill", host, str(quota)] if quota else \
            ["lab/lab.sh", "fault", "slow-prefill-off", host]
        subprocess.run(argv, cwd=REPO, check=True, stdout=subprocess.DEVNULL)


def cmd_detect(args: argparse.Namespace, target: Target) -> None:
    with _client(target) as client:
        baseline, res = record(client, target.model, target.tokens, floor=target.floor)
    if baseline is None:
        sys.exit(f"no baseline: {res['reason']}")
    th = prefill.threshold(baseline, floor=target.floor)
    print(f"baseline {th.reference * 1e6:.2f} us/token, noise {th.noise:.3f}x, threshold {th.value:.3f}x, "
          f"too noisy: {th.too_noisy}")
    verdicts: dict[str, int] = {}
    ratios = []
    knob(target.hosts, args.quota)
    try:
        for i in range(args.runs):
            with _client(target) as client:
                r = probe(client, target.model, target.tokens, baseline, floor=target.floor)
            verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
            if r["ratio"] is not None:
                ratios.append(r["ratio"])
            print(f"run {i + 1:3d}/{args.runs}: {r['verdict']:12s} ratio {r['ratio'] or 0:.3f} "
                  f"({len(r['samples'])} samples)", flush=True)
    finally:
        knob(target.hosts, None)
    med = statistics.median(ratios) if ratios else float("nan")
    print(f"quota {args.quota}%: median ratio {med:.3f}x; " + ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items()))
          + f"; detection {verdicts.get('degraded', 0) / args.runs:.0%} of {args.runs}")


def parser() -> argparse.ArgumentParser:
    doc = __doc__.split("\n\n", 1)
    ap = argparse.ArgumentParser(prog="bench/prefill_detect.py", description=doc[0],
                                 epilog=doc[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    target = argparse.ArgumentParser(add_help=False)
    g = target.add_argument_group("the engine (from the inventory; the options override its record)")
    g.add_argument("-i", "--inventory", metavar="INVENTORY",
                   help="the site's inventory, inventory/<site> (the lab: inventory/lab); no default")
    g.add_argument("--engine", metavar="NAME",
                   help="the engine (its vllm_fleet_engine), when the inventory has several")
    g.add_argument("--url", help="the engine's API address, http://HOST:PORT (default: the record's, its head's)")
    g.add_argument("--model", help="the served model name (default: the record's served_model_name)")
    g.add_argument("--tokens", type=int,
                   help="prompt tokens per sample (default: the record's probe_prompt_tokens, as the probe sends)")
    g.add_argument("--api-key-env", metavar="VAR",
                   help="take the engine's API key from $VAR (default: the inventory's vllm_server_api_key)")
    v = target.add_argument_group("the inventory's vault, as for ansible-playbook")
    v.add_argument("--vault-id", action="append", default=[], metavar="ID@SOURCE")
    v.add_argument("--vault-password-file", action="append", default=[], metavar="FILE")
    v.add_argument("--ask-vault-pass", action="store_true")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("show", parents=[target], help="print the engine the other steps would probe; send nothing")
    r = sub.add_parser("record", parents=[target], help="record N healthy probe runs")
    r.add_argument("--runs", type=int, default=60)
    r.add_argument("--gap", type=float, default=2.0, help="seconds between runs")
    r.add_argument("--out", required=True)
    p = sub.add_parser("replay", help="replay a recorded file through the rule at each floor (no engine)")
    p.add_argument("file")
    p.add_argument("--floor", type=float, default=prefill.FLOOR)
    p.add_argument("--floors", type=float, nargs="*", default=[prefill.FLOOR, 1.2, 1.3, 1.4, 1.5, 1.6, 1.8])
    p.add_argument("--all-pairs", action="store_true",
                   help="also any two groups as the baseline (every combination: slow, minutes for 150 runs)")
    d = sub.add_parser("detect", parents=[target], help="the lab only: detection under the slow-prefill knob")
    d.add_argument("--quota", type=int, required=True, help="slow-prefill CPU quota, percent of one CPU")
    d.add_argument("--runs", type=int, default=30)
    d.add_argument("--floor", type=float, help="the threshold floor (default: the record's)")
    return ap


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    args.argv = argv
    if args.cmd == "replay":
        return cmd_replay(args)
    try:
        target = resolve(args)
        if args.cmd == "detect":
            lab_only(target)
    except TargetError as e:
        sys.exit(f"prefill_detect.py {args.cmd}: {e}")
    print(target.describe(), flush=True)
    if args.cmd == "show":
        return None
    try:
        {"record": cmd_record, "detect": cmd_detect}[args.cmd](args, target)
    except prefill.PrefillError as e:
        sys.exit(f"prefill_detect.py {args.cmd}: {target.url}: {e}")


if __name__ == "__main__":
    main()
