"""Every module in library/ against its own documentation.

Discovered, so a new module is checked as soon as it lands. For each one:

- the file's order (DOCUMENTATION, EXAMPLES, RETURN, then the imports) and its name;
- DOCUMENTATION's options against the argument spec ``main()`` gives AnsibleModule:
  the same names, and per option the same type, required, default, choices,
  elements and aliases; every mutually exclusive, required-one-of and
  required-together group named, every member, in the description of one of
  its options, and every required_by / required_if next to the option it binds;
- ``attributes`` with check_mode and diff_mode, check_mode matching
  ``supports_check_mode``;
- every ``O(...)`` and ``RV(...)`` naming a documented option or return key;
- ``seealso`` citing a module of library/, a public https link, or a file this repository has;
- EXAMPLES as YAML tasks that call the module with documented options only,
  the required ones given and the groups respected;
- RETURN against one real run (RUNS, through each module test file's own
  fakes and fixtures): every key returned is documented, every key documented
  as always returned is there, with the documented type, elements and
  ``contains`` keys;
- ``ansible-doc`` renders it, naming every option and return key;
- docs/modules.md has a section for it that names every option and return key.
"""
from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from module_docs import LIBRARY, REPO, ansible_module_kwargs, module_doc

MODULES = sorted(p.stem for p in LIBRARY.glob("*.py"))
# Keys Ansible itself adds to a result, or every module may return undocumented.
COMMON_RETURN = {"changed", "failed", "msg", "invocation", "warnings", "deprecations"}
GROUPS = ("mutually_exclusive", "required_one_of", "required_together")
PYTHON_TYPES = {"bool": bool, "int": int, "float": (int, float), "str": str, "path": str, "list": list,
                "dict": dict}
# O(name), O(name=value), O(name.sub), RV(key=value); cross-module references (a#b) are left alone.
MARKUP = re.compile(r"\b(O|RV)\(([^)#]+)\)")


def doc(name: str, block: str):
    return module_doc(f"{name}.py", block)


def kwargs(name: str) -> dict:
    return ansible_module_kwargs(importlib.import_module(name))


def test_library_holds_only_modules():
    others = [p.name for p in LIBRARY.iterdir() if p.suffix != ".py" and p.name != "__pycache__"]
    assert others == [], "library/ is for modules; these would go unchecked"
    assert len(MODULES) >= 5


# --- layout -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", MODULES)
def test_file_order_and_name(name):
    tree = ast.parse((LIBRARY / f"{name}.py").read_text())
    order = [n.targets[0].id for n in tree.body
             if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) in ("DOCUMENTATION", "EXAMPLES",
                                                                                     "RETURN")]
    assert order == ["DOCUMENTATION", "EXAMPLES", "RETURN"]
    first_import = next(i for i, n in enumerate(tree.body) if isinstance(n, (ast.Import, ast.ImportFrom))
                        and not (isinstance(n, ast.ImportFrom) and n.module == "__future__"))
    last_block = max(i for i, n in enumerate(tree.body) if isinstance(n, ast.Assign)
                     and getattr(n.targets[0], "id", None) == "RETURN")
    assert first_import > last_block, "imports come after RETURN"
    documentation = doc(name, "DOCUMENTATION")
    assert documentation["module"] == name
    for key in ("short_description", "description", "options", "author"):
        assert documentation.get(key), f"DOCUMENTATION has no {key}"


# --- options against the argument spec -----------------------------------------------------------

def option_mismatches(options: dict, spec: dict, where: str = "") -> list:
    """Every difference between documented options and an argument spec, in words."""
    problems = []
    if sorted(options) != sorted(spec):
        problems.append(f"{where}options {sorted(options)} != argspec {sorted(spec)}")
    for name in sorted(set(options) & set(spec)):
        opt, arg = options[name], spec[name]
        label = f"{where}{name}"
        if not opt.get("description"):
            problems.append(f"{label}: no description")
        pairs = {
            "type": (opt.get("type", "str"), arg.get("type", "str")),
            "required": (opt.get("required", False), arg.get("required", False)),
            "default": (opt.get("default"), arg.get("default")),
            "choices": (opt.get("choices"), arg.get("choices")),
            "elements": (opt.get("elements"), arg.get("elements")),
            "aliases": (sorted(opt.get("aliases", [])), sorted(arg.get("aliases", []))),
        }
        for key, (documented, coded) in pairs.items():
            if documented != coded:
                problems.append(f"{label}: {key} documented {documented!r}, argspec {coded!r}")
        if "options" in arg or "suboptions" in opt:
            problems += option_mismatches(opt.get("suboptions", {}), arg.get("options", {}), label + ".")
    return problems


@pytest.mark.parametrize("name", MODULES)
def test_options_match_the_argument_spec(name):
    assert option_mismatches(doc(name, "DOCUMENTATION")["options"], kwargs(name)["argument_spec"]) == []


def groups(module_kwargs: dict):
    """(kind, [option names]) for each constraint AnsibleModule enforces between options."""
    for kind in GROUPS:
        for group in module_kwargs.get(kind) or []:
            yield kind, list(group)
    for key, needs in (module_kwargs.get("required_by") or {}).items():
        yield "required_by", [key] + ([needs] if isinstance(needs, str) else list(needs))
    for rule in module_kwargs.get("required_if") or []:
        yield "required_if", [rule[0]] + list(rule[2])


def named(text, option: str) -> bool:
    return re.search(r"O\(%s[=)]" % re.escape(option), str(text)) is not None


@pytest.mark.parametrize("name", MODULES)
def test_option_groups_are_documented(name):
    options = doc(name, "DOCUMENTATION")["options"]

    def says(owner, others):
        return all(named(options.get(owner, {}).get("description"), m) for m in others)

    for kind, members in groups(kwargs(name)):
        if kind in ("required_by", "required_if"):
            # "Requires O(b)" on the option that needs the others, or "Needed by O(a)" on each of them.
            key, needed = members[0], members[1:]
            assert says(key, needed) or all(says(m, [key]) for m in needed), f"{kind} {members}: not documented"
        else:
            # One member's description says it of them all ("Exactly one of O(a), O(b) and O(c)...").
            assert any(says(owner, members) for owner in members), \
                f"{kind} {members}: no option's description names all of them"


# --- attributes -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", MODULES)
def test_attributes(name):
    attributes = doc(name, "DOCUMENTATION").get("attributes") or {}
    for attribute in ("check_mode", "diff_mode"):
        assert attributes.get(attribute, {}).get("support") in ("full", "partial", "none"), attribute
    supports = kwargs(name).get("supports_check_mode", False)
    assert (attributes["check_mode"]["support"] != "none") is supports
    if name.endswith("_info"):
        # Read-only: runs the same in check mode, has nothing to diff.
        assert (attributes["check_mode"]["support"], attributes["diff_mode"]["support"]) == ("full", "none")


# --- markup ------------------------------------------------------------------------------------------

def strings(value):
    """Every string in a parsed YAML block."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


@pytest.mark.parametrize("name", MODULES)
def test_markup_names_real_options_and_return_keys(name):
    known = {"O": set(doc(name, "DOCUMENTATION")["options"]), "RV": set(doc(name, "RETURN") or {})}
    text = "\n".join(strings([doc(name, "DOCUMENTATION"), doc(name, "RETURN")]))
    refs = [(kind, ref.split("=", 1)[0].split(".", 1)[0].split("[", 1)[0]) for kind, ref in MARKUP.findall(text)]
    assert refs, "the documentation names none of its options"
    assert [f"{kind}({ref})" for kind, ref in refs if ref not in known[kind]] == []


@pytest.mark.parametrize("name", MODULES)
def test_seealso_cites_what_exists(name):
    for entry in doc(name, "DOCUMENTATION").get("seealso") or []:
        if "module" in entry:
            assert entry["module"] in MODULES or "." in entry["module"], entry
        else:
            assert str(entry.get("link", "")).startswith("https://"), entry
        # A file named as this repository's must be in it (not in notes kept elsewhere).
        for path in re.findall(r"[\w.-]+(?:/[\w.-]+)+\.(?:md|py|ya?ml|txt|log)\b", entry.get("description", "")):
            assert (REPO / path).is_file(), f"seealso cites {path}, which this repository does not have"


# --- EXAMPLES -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", MODULES)
def test_examples_call_only_documented_options(name):
    examples = doc(name, "EXAMPLES")
    assert isinstance(examples, list) and all(isinstance(t, dict) and t.get("name") for t in examples)
    calls = [t[name] for t in examples if name in t]
    assert calls, "no example calls the module by its bare name"
    options = doc(name, "DOCUMENTATION")["options"]
    spellings = set(options) | {a for o in options.values() for a in o.get("aliases", [])}
    required = {o for o, spec in options.items() if spec.get("required")}
    module_kwargs = kwargs(name)
    for args in calls:
        assert isinstance(args, dict), args
        given = set(args)
        assert given - spellings == set(), f"undocumented options in {args}"
        assert required - given == set(), f"required options missing in {args}"
        for kind, members in groups(module_kwargs):
            present = given & set(members)
            if kind == "mutually_exclusive":
                assert len(present) <= 1, f"{args}: {sorted(present)} are mutually exclusive"
            elif kind == "required_one_of":
                assert present, f"{args}: needs one of {members}"
            elif kind == "required_together":
                assert present in (set(), set(members)), f"{args}: {members} go together"


# --- RETURN against a real run -------------------------------------------------------------------------
# How to run each module once, successfully, with the fakes and real captures
# its own test file uses. A new module needs an entry here.

def _gpu_preflight_info(run_module, tmp_path, monkeypatch):
    import test_gpu_preflight_info as t

    host = t.Host(tmp_path, monkeypatch)
    host.nvidia_smi(t.GB10_TABLE, t.GB10_CSV)
    model = tmp_path / "model"
    model.mkdir()
    return run_module(t.gpu_preflight_info, dict(t.FIELD, ports=[29555], disk_path=str(model), min_disk_gib=0.001,
                                                 controller_time=time.time()))


def _gpu_state_info(run_module, tmp_path, monkeypatch):
    import test_gpu_state_info as t

    exe = t.fake_smi(tmp_path, f'cat "{t.CAPTURES / t.POWER_CAP}"\n')
    return run_module(t.gpu_state_info, {"nvidia_smi": str(exe)})


def _ray_cluster_info(run_module, tmp_path, monkeypatch):
    import test_ray_cluster_info as t

    python = t.fake_python(tmp_path, t.CAPTURE.read_text())
    return run_module(t.module, t.args(python, expect_ips=t.LAB_IPS, expect_gpus=2))


def _ray_firewall_info(run_module, tmp_path, monkeypatch):
    import test_ray_firewall_info as t

    (tmp_path / "range").write_text("32768\t60999\n")
    monkeypatch.setattr(t.module, "RANGE_FILE", str(tmp_path / "range"))
    return run_module(t.module, t.args(peers=t.PEERS + ["fd00::1"]))


def _vllm_flags_info(run_module, tmp_path, monkeypatch):
    import test_vllm_flags_info as t

    # A forbidden flag and one this version lacks, reported only: mismatches and unsupported are filled.
    return run_module(t.vllm_flags_info, dict(cmdline="vllm serve /m --watermark 0.15 --bogus x", help_text=t.HELP,
                                              vllm_version="0.32.0", forbid=["watermark"], on_mismatch="warn"))


def _vllm_gate(run_module, tmp_path, monkeypatch):
    import test_vllm_gate as t

    # Reading one upstream of the real gate: every key has a value.
    with t.running_gate(tmp_path) as url:
        return run_module(t.vllm_gate, {"url": url, "admin_token": t.ADMIN, "upstream": t.ENGINES[0]})


def _vllm_health_info(run_module, tmp_path, monkeypatch):
    import test_vllm_health_info as t

    # A unit that died at start while its port still answered 503: every key has a value.
    systemd = t.Systemd(tmp_path, monkeypatch)
    systemd.set(active="failed", result="exit-code")
    systemd.journal.write_text(t.RAY_ON_CPU.read_text())
    with t.Health(503) as server:
        return run_module(t.module, {"url": server.url, "unit": t.UNIT})


def _vllm_kv_cache_info(run_module, tmp_path, monkeypatch):
    import test_vllm_kv_cache_info as t

    return run_module(t.module, {"path": str(t.CI_RECIPE), "context_tokens": 1024})


def _vllm_prefill_probe(run_module, tmp_path, monkeypatch):
    import test_vllm_prefill_probe as t

    # A probe at 3x a baseline recorded at 1x, with the unit's uptime: every key has a value but the
    # passive reading's (passive, metrics_after), which a quiet engine does not take, and too_noisy,
    # which only mode=baseline returns.
    t.Systemd(tmp_path, monkeypatch)
    path = tmp_path / "baseline.json"
    t.write_baseline(path)
    with t.FakeVllm(trim=True) as fake:
        fake.scale = 3.0
        return run_module(t.module, t.args(fake, path, unit=t.UNIT))


def _vllm_golden_info(run_module, tmp_path, monkeypatch):
    import test_vllm_golden_info as t

    # A replay of a recording: every key has a value but first_difference (equal tokens).
    with t.FakeVllm(trim=True) as fake:
        fake.answers = t.golden_answers("0.32.0")
        recorded = run_module(t.module, {"url": fake.url, "model": t.MODEL})["golden"]
        return run_module(t.module, {"url": fake.url, "model": t.MODEL, "recorded": t.json.dumps(recorded)})


def _vllm_watch_metrics(run_module, tmp_path, monkeypatch):
    import test_vllm_watch_metrics as t

    head = tmp_path / "head"
    (head / "textfile").mkdir(parents=True)
    t.shutil.copy(t.BASELINE, head / "prefill-baseline.json")
    return run_module(t.module, t.args(head))


def _vllm_cure_ledger(run_module, tmp_path, monkeypatch):
    import test_vllm_cure_ledger as t

    return run_module(t.module, t.args(tmp_path, "budget", policy="when-degraded"))


def _vllm_evidence(run_module, tmp_path, monkeypatch):
    import test_vllm_evidence as t

    fixture = t.host.__wrapped__(tmp_path, monkeypatch)
    h = next(fixture)
    try:
        return run_module(t.module, t.args(h))
    finally:
        next(fixture, None)


RUNS = {
    "gpu_preflight_info": _gpu_preflight_info,
    "gpu_state_info": _gpu_state_info,
    "ray_cluster_info": _ray_cluster_info,
    "ray_firewall_info": _ray_firewall_info,
    "vllm_cure_ledger": _vllm_cure_ledger,
    "vllm_evidence": _vllm_evidence,
    "vllm_flags_info": _vllm_flags_info,
    "vllm_gate": _vllm_gate,
    "vllm_golden_info": _vllm_golden_info,
    "vllm_health_info": _vllm_health_info,
    "vllm_kv_cache_info": _vllm_kv_cache_info,
    "vllm_prefill_probe": _vllm_prefill_probe,
    "vllm_watch_metrics": _vllm_watch_metrics,
}


def type_mismatches(label: str, value, spec: dict) -> list:
    """Where a returned value is not of its documented type, elements and contains."""
    expected = PYTHON_TYPES.get(spec.get("type"))
    if value is None or expected is None:
        return []
    if not isinstance(value, expected) or (isinstance(value, bool) and spec["type"] != "bool"):
        return [f"{label}: documented {spec['type']}, returned {type(value).__name__} {value!r:.80}"]
    items = value if isinstance(value, list) else [value] if isinstance(value, dict) else []
    problems = []
    if isinstance(value, list) and spec.get("elements"):
        for i, item in enumerate(value):
            problems += type_mismatches(f"{label}[{i}]", item, {"type": spec["elements"]})
    if spec.get("contains"):
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                problems.append(f"{label}[{i}]: documented contains, returned {type(item).__name__}")
                continue
            if set(item) != set(spec["contains"]):
                problems.append(f"{label}[{i}]: keys {sorted(item)}, documented {sorted(spec['contains'])}")
            for key in set(item) & set(spec["contains"]):
                problems += type_mismatches(f"{label}[{i}].{key}", item[key], spec["contains"][key])
    return problems


def test_every_module_has_a_run():
    assert sorted(RUNS) == MODULES, "add how to run a new module once to RUNS"


@pytest.mark.parametrize("name", MODULES)
def test_return_documents_every_key(name, run_module, tmp_path, monkeypatch):
    if name not in RUNS:
        pytest.fail(f"RUNS has no run of {name}: add one built on its test file's fixtures")
    result = RUNS[name](run_module, tmp_path, monkeypatch)
    assert result.get("failed") is not True, result.get("msg")
    documented = doc(name, "RETURN") or {}
    for key, spec in documented.items():
        assert spec.get("description") and spec.get("returned") and spec.get("type"), f"{key}: incomplete"
    returned = set(result) - COMMON_RETURN
    assert sorted(returned - set(documented)) == [], "returned but not documented"
    always = {k for k, spec in documented.items() if spec["returned"] == "always"} - COMMON_RETURN
    assert sorted(always - returned) == [], "documented as always returned, but missing"
    problems = []
    for key in sorted(returned):
        problems += type_mismatches(key, result[key], documented[key])
    assert problems == []


# --- docs/modules.md -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", MODULES)
def test_docs_modules_md_covers_the_module(name):
    text = (REPO / "docs" / "modules.md").read_text()
    assert f"\n## {name}\n" in text, f"docs/modules.md has no section for {name}"
    section = text.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]
    names = set(doc(name, "DOCUMENTATION")["options"]) | set(doc(name, "RETURN") or {})
    assert sorted(n for n in names - {"changed"} if not re.search(r"`%s[`:= ]" % re.escape(n), section)) == []


# --- ansible-doc --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", MODULES)
def test_ansible_doc_renders(name):
    ansible_doc = Path(sys.executable).parent / "ansible-doc"
    out = subprocess.run([str(ansible_doc), "-M", "library", name], cwd=REPO, capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert "ERROR" not in out.stderr and "WARNING" not in out.stderr, out.stderr
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.stdout)
    assert f"MODULE {name} " in text
    for section in ("OPTIONS", "ATTRIBUTES", "EXAMPLES", "RETURN VALUES"):
        assert section in text, section
    words = set(re.findall(r"[\w.-]+", text))
    names = set(doc(name, "DOCUMENTATION")["options"]) | set(doc(name, "RETURN") or {})
    assert sorted(names - words) == [], "not rendered"
