"""Tests for plugins/filter/fleet.py: engines from the inventory, vLLM argv, and
the systemd quoting that puts that argv into the unit's ExecStart=.

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
engine_peers = FILTERS["engine_peers"]
engine_names = FILTERS["engine_names"]
vllm_argv = FILTERS["vllm_argv"]
systemd_quote = FILTERS["systemd_quote"]


def test_filters_are_registered():
    assert set(FILTERS) == {"engine_peers", "engine_names", "engine_heads", "vllm_argv", "systemd_quote"}


# --- engine_peers / engine_names ------------------------------------------------------------

# The lab's shape (inventory/lab/hosts.yml), listed out of rank order, plus a
# second engine, a host addressed by vllm_fleet_address, one by name only, and
# a consumer without an engine.
HOSTVARS = {
    "lab2": {"vllm_fleet_engine": "engine_lab", "vllm_fleet_rank": 1, "ansible_host": "10.200.0.12"},
    "spark1": {"vllm_fleet_engine": "engine_b", "vllm_fleet_rank": 0, "ansible_host": "spark1.mgmt"},
    "lab1": {"vllm_fleet_engine": "engine_lab", "vllm_fleet_rank": "0", "ansible_host": "10.200.0.11",
             "vllm_fleet_address": "192.168.50.11"},
    "lab3": {"ansible_host": "10.200.0.13"},
    "lab4": {"vllm_fleet_engine": "engine_lab", "vllm_fleet_rank": 2},
}
HOSTS = list(HOSTVARS)


@pytest.mark.parametrize("engine, peers", [
    ("engine_lab", [
        {"name": "lab1", "rank": 0, "address": "192.168.50.11"},  # vllm_fleet_address wins over ansible_host
        {"name": "lab2", "rank": 1, "address": "10.200.0.12"},    # then ansible_host
        {"name": "lab4", "rank": 2, "address": "lab4"},           # then the inventory name
    ]),
    ("engine_b", [{"name": "spark1", "rank": 0, "address": "spark1.mgmt"}]),
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
    with pytest.raises(AnsibleFilterError) as err:
        engine_peers(HOSTS, hostvars, "engine_lab")
    assert err.value.message == (
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
        {"engine": "engine_lab", "name": "lab1", "rank": 0, "address": "192.168.50.11"},
        {"engine": "engine_b", "name": "spark1", "rank": 0, "address": "spark1.mgmt"},
    ]


def test_engine_heads_needs_a_rank_0():
    hostvars = dict(HOSTVARS, lab1=dict(HOSTVARS["lab1"], vllm_fleet_rank=3))
    with pytest.raises(AnsibleFilterError) as err:
        FILTERS["engine_heads"](HOSTS, hostvars)
    assert err.value.message == "engine engine_lab has no host with vllm_fleet_rank 0"


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
