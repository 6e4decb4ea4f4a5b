"""bench/prefill_detect.py finds its engine in an inventory as the playbooks do.

The argument handling and the record reading run against inventory/example,
inventory/lab and inventory/lab-two-engines, and against vaulted copies of
the example, with no network: the engine's HTTP side is the loopback fake
vLLM (tests/prefill_fake.py) where a run needs one. Inline-vault cases run in
a child process, because Ansible's vault context is set once per process.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from prefill_fake import FakeVllm

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "bench" / "prefill_detect.py"
_spec = importlib.util.spec_from_file_location("prefill_detect", SCRIPT)
pd = importlib.util.module_from_spec(_spec)
sys.modules["prefill_detect"] = pd  # its dataclass looks its module up
_spec.loader.exec_module(pd)

LAB_KEY = yaml.safe_load((REPO / "inventory" / "lab" / "group_vars" / "all" / "secrets.yml").read_text())[
    "vllm_server_api_key"]
VAULT_PASSWORD = "pw-for-the-test-vault"
VAULTED_KEY = "engine-key-from-the-vault-7f3e"


def target(*argv: str, environ=None) -> pd.Target:
    """What ``show ARGV`` would probe."""
    return pd.resolve(pd.parser().parse_args(["show", *argv]), environ or {})


def refused(*argv: str, environ=None) -> str:
    with pytest.raises(pd.TargetError) as e:
        target(*argv, environ=environ)
    return str(e.value)


# --- the record, as the playbooks build it ---------------------------------------

@pytest.mark.parametrize("inventory,expected", [
    ("inventory/lab", dict(engine="engine_lab", url="http://10.200.0.11:8000", model="tiny", tokens=1024,
                           floor=1.5, hosts=("lab1", "lab2"))),
    ("inventory/lab/hosts.yml", dict(engine="engine_lab", url="http://10.200.0.11:8000", model="tiny", tokens=1024,
                                     floor=1.5, hosts=("lab1", "lab2"))),
    ("inventory/example", dict(engine="engine_a", url="http://192.0.2.11:8000", model="model", tokens=4096,
                               floor=1.12, hosts=("spark1", "spark2"))),
])
def test_the_engine_comes_from_the_inventorys_record(inventory, expected):
    """URL (the head's address and port), served model name, the probe's own prompt
    length (the lab's 4,096 default capped at half its 2,048 context) and floor."""
    t = target("-i", inventory)
    assert dict(engine=t.engine, url=t.url, model=t.model, tokens=t.tokens, floor=t.floor, hosts=t.hosts) == expected
    assert t.inventory == inventory


def test_the_key_is_the_inventorys_and_is_never_shown():
    lab = target("-i", "inventory/lab")
    assert lab.api_key == LAB_KEY
    assert lab.key_source == "the inventory's vllm_server_api_key (host lab1)"
    assert LAB_KEY not in lab.describe() + repr(lab)
    example = target("-i", "inventory/example")
    assert example.api_key is None and example.key_source == "none (the inventory sets none)"


def test_an_engine_is_named_when_the_inventory_has_several():
    message = refused("-i", "inventory/lab-two-engines")
    assert message == ("the inventory inventory/lab-two-engines has 2 engines (engine_a, engine_b):"
                       " name one, --engine engine_a")
    b = target("-i", "inventory/lab-two-engines", "--engine", "engine_b")
    assert (b.engine, b.url, b.hosts) == ("engine_b", "http://10.200.0.12:8000", ("lab2",))
    assert refused("-i", "inventory/lab", "--engine", "engine_x") == \
        "the inventory inventory/lab has no engine 'engine_x'; it has engine_lab"


def test_a_missing_inventory_says_what_to_give():
    assert refused("-i", "inventory/nowhere") == \
        "no inventory at inventory/nowhere: give the site's, -i inventory/<site> (the lab: -i inventory/lab)"


# --- overrides and no inventory ------------------------------------------------

@pytest.mark.parametrize("argv,field,value", [
    (["--url", "http://127.0.0.1:18000"], "url", "http://127.0.0.1:18000"),
    (["--model", "other"], "model", "other"),
    (["--tokens", "512"], "tokens", 512),
])
def test_an_option_overrides_the_record(argv, field, value):
    t = target("-i", "inventory/lab", *argv)
    assert getattr(t, field) == value
    assert t.api_key == LAB_KEY  # the rest still from the inventory


def test_api_key_env_overrides_the_inventorys_key():
    t = target("-i", "inventory/lab", "--api-key-env", "SITE_KEY", environ={"SITE_KEY": "from-the-env"})
    assert (t.api_key, t.key_source) == ("from-the-env", "$SITE_KEY")
    assert "from-the-env" not in t.describe() + repr(t)
    assert refused("-i", "inventory/lab", "--api-key-env", "SITE_KEY", environ={}) == (
        "--api-key-env SITE_KEY: $SITE_KEY is not set or empty; export it, or leave the option out to use the"
        " inventory's key")


def test_without_an_inventory_every_value_is_given():
    """No default site: the lab is -i inventory/lab, like any other."""
    assert refused() == ("which engine? Give the site's inventory, -i inventory/<site> (the lab: -i inventory/lab),"
                         " or --url, --model, --tokens (and --api-key-env VAR for its key)")
    assert refused("--url", "http://h:8000").endswith("or --model, --tokens (and --api-key-env VAR for its key)")
    t = target("--url", "http://h:8000", "--model", "m", "--tokens", "100")
    assert (t.url, t.model, t.tokens, t.floor, t.api_key, t.engine) == ("http://h:8000", "m", 100, 1.12, None, None)
    t = target("--url", "http://h:8000", "--model", "m", "--tokens", "100", "--api-key-env", "K", environ={"K": "k"})
    assert t.api_key == "k"
    assert refused("--engine", "engine_a") == "--engine names an engine of an inventory: give it, -i inventory/<site>"


@pytest.mark.parametrize("argv,message", [
    (["--url", "https://h:8000"], "--url: url 'https://h:8000' must be http://HOST:PORT, the engine's own API address"),
    (["--tokens", "8"], "--tokens 8: a prompt of at least 16 tokens is needed to time a prefill"),
])
def test_a_bad_override_is_refused_before_any_request(argv, message):
    assert refused("-i", "inventory/lab", *argv) == message


def test_detect_refuses_an_inventory_that_is_not_the_labs(monkeypatch, capsys):
    """Its knob is lab/lab.sh's: nothing runs, no request is sent."""
    monkeypatch.setattr(pd.subprocess, "run", lambda *a, **k: pytest.fail("the knob ran"))
    monkeypatch.setattr(pd, "_client", lambda *a, **k: pytest.fail("a request was sent"))
    with pytest.raises(SystemExit) as e:
        pd.main(["detect", "-i", "inventory/example", "--quota", "60"])
    assert str(e.value).startswith("prefill_detect.py detect: detect sets the lab's slow-prefill knob")
    for lab in ("inventory/lab", "inventory/lab/hosts.yml", "inventory/lab-two-engines"):
        assert pd.lab_only(target("-i", lab, "--engine", "engine_a" if "two" in lab else "engine_lab")) is None
    assert target("-i", "inventory/lab").floor == 1.5
    detect = pd.resolve(pd.parser().parse_args(["detect", "-i", "inventory/lab", "--quota", "60", "--floor", "2"]), {})
    assert detect.floor == 2.0


def test_help_names_the_inventory_and_the_lab_choice(capsys):
    with pytest.raises(SystemExit):
        pd.main(["record", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "-i INVENTORY, --inventory INVENTORY the site's inventory, inventory/<site> (the lab: inventory/lab);" \
           " no default" in out
    assert "--api-key-env VAR" in out and "--vault-password-file FILE" in out
    with pytest.raises(SystemExit):
        pd.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert ("There is no default site, so that a site's run never probes the lab's addresses with the lab's key:"
            " the lab is `-i inventory/lab`") in out


# --- a run, against the loopback fake vLLM -------------------------------------------

def test_record_sends_the_inventorys_model_and_key_and_writes_neither_key_nor_secret(tmp_path, capsys):
    """record -i inventory/lab, with --url at the fake (which refuses /v1 without the
    lab's key, as vLLM's --api-key does): the model and the key are the inventory's."""
    out = tmp_path / "healthy.json"
    with FakeVllm(model="tiny", api_key=LAB_KEY, trim=True) as fake:
        pd.main(["record", "-i", "inventory/lab", "--url", fake.url, "--runs", "2", "--gap", "0", "--out", str(out)])
        completions = [r for r in fake.requests if r[1] == "/v1/completions"]
    assert len(completions) == 2 * (1 + 4)  # per run: a warm-up and a group of 4
    assert all(r[3]["model"] == "tiny" for r in completions)
    data = json.loads(out.read_text())
    assert data["source"] == ("bench/prefill_detect.py record -i inventory/lab --url %s --runs 2 --gap 0 --out %s"
                              % (fake.url, out))
    assert data["engine"].startswith("engine_lab (%s, model tiny, vLLM " % fake.url)
    assert data["prompt_tokens"] == 1024 and len(data["groups"]) == 2
    printed = capsys.readouterr()
    assert printed.out.startswith("engine engine_lab of inventory/lab: %s, model tiny, 1024-token prompts" % fake.url)
    for text in (printed.out, printed.err, out.read_text()):
        assert LAB_KEY not in text


def test_a_refused_key_stops_the_run_with_the_engines_answer(tmp_path):
    with FakeVllm(model="tiny", api_key="another-key", trim=True) as fake:
        with pytest.raises(SystemExit) as e:
            pd.main(["record", "-i", "inventory/lab", "--url", fake.url, "--runs", "1", "--out", str(tmp_path / "o")])
    assert "answered HTTP 401" in str(e.value) and LAB_KEY not in str(e.value)


def test_replay_needs_no_engine(capsys):
    pd.main(["replay", str(REPO / "tests" / "fixtures" / "prefill" / "lab-healthy-groups.json"),
             "--floor", "1.5", "--floors"])
    out = capsys.readouterr().out
    assert out.startswith("160 healthy groups;") and "floor 1.50, adjacent groups as the baseline:" in out


# --- vault-encrypted and templated keys (a child process each) -----------------------

def _vault(text: str) -> str:
    from ansible.parsing.vault import VaultLib, VaultSecret
    return VaultLib([("default", VaultSecret(VAULT_PASSWORD.encode()))]).encrypt(text).decode()


@pytest.fixture()
def vaulted(tmp_path):
    """Copies of inventory/example whose key is (a) a template over a vault-encrypted
    group_vars file, as its README says, and (b) an inline !vault value."""
    (tmp_path / "pw").write_text(VAULT_PASSWORD + "\n")
    file_vault = tmp_path / "file-vault"
    shutil.copytree(REPO / "inventory" / "example", file_vault)
    engines = file_vault / "group_vars" / "vllm_engines"
    (engines / "vault.yml").write_text(_vault("---\nvault_vllm_api_key: %s\n" % VAULTED_KEY))
    with (engines / "engine.yml").open("a") as f:
        f.write('vllm_server_api_key: "{{ vault_vllm_api_key }}"\n')
    inline = tmp_path / "inline-vault"
    shutil.copytree(REPO / "inventory" / "example", inline)
    with (inline / "group_vars" / "vllm_engines" / "engine.yml").open("a") as f:
        f.write("vllm_server_api_key: !vault |\n"
                + "".join("  %s\n" % line for line in _vault(VAULTED_KEY).splitlines()))
    return tmp_path


RESOLVE = """
import hashlib, importlib.util, json, sys
spec = importlib.util.spec_from_file_location("pd", %r)
pd = sys.modules["pd"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pd)
try:
    record, key = pd.read_inventory(sys.argv[1], vault_password_files=sys.argv[2:])
except pd.TargetError as e:
    sys.exit(str(e))
print(json.dumps({"engine": record["name"], "key_sha256": hashlib.sha256(key.encode()).hexdigest()}))
""" % str(SCRIPT)


def resolve_in_child(inventory: Path, *password_files: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", RESOLVE, str(inventory), *map(str, password_files)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("kind", ["file-vault", "inline-vault"])
def test_a_vaulted_key_is_resolved_through_ansible(vaulted, kind):
    result = resolve_in_child(vaulted / kind, vaulted / "pw")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"engine": "engine_a",
                                         "key_sha256": hashlib.sha256(VAULTED_KEY.encode()).hexdigest()}


@pytest.mark.parametrize("kind,start", [
    ("file-vault", "Ansible could not read the inventory %s (AnsibleParserError: Attempting to decrypt but no vault"
                   " secrets found): give the vault password as to ansible-playbook: --vault-password-file FILE"),
    ("inline-vault", "the inventory %s sets vllm_server_api_key for spark1, but Ansible cannot resolve it"
                     " (AnsibleTemplateError): for a vault-encrypted value, give the vault password as to"
                     " ansible-playbook: --vault-password-file FILE"),
])
def test_a_vaulted_key_without_its_password_says_how_to_give_it(vaulted, kind, start):
    result = resolve_in_child(vaulted / kind)
    assert result.returncode == 1
    assert result.stderr.startswith(start % (vaulted / kind)), result.stderr
    assert "Traceback" not in result.stderr


def test_show_prints_where_the_key_comes_from_never_the_key(vaulted):
    result = subprocess.run([sys.executable, str(SCRIPT), "show", "-i", str(vaulted / "file-vault"),
                             "--vault-password-file", str(vaulted / "pw")],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ("engine engine_a of %s: http://192.0.2.11:8000, model model, 4096-token prompts,"
                             " floor 1.12; API key: the inventory's vllm_server_api_key (host spark1)\n"
                             % (vaulted / "file-vault"))
    assert VAULTED_KEY not in result.stdout + result.stderr
