"""Every knob a message names exists.

A refusal or failure message that tells the operator to set a variable must
name one the toolkit reads: a role's default, an argument spec's option, a
host or group variable of the example inventory, or an extra var a default
reads (``restart_policy``). A message naming a knob that does not exist sends
the operator in a circle at 3 a.m. (the restart's hold refusal once named two).

Messages are the string constants of plugins/ and library/ that contain a
space, and the ``msg``/``fail_msg`` of the roles' and playbooks' tasks. A word
is taken for a knob when it starts with a role's name or ``vllm_fleet_`` and
is not another kind of name the messages use: a module, a role, a filter, a
tag, or a registered or set fact.
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if p.is_dir())
KNOB_PREFIXES = tuple(f"{role}_" for role in ROLES) + ("vllm_fleet_", "restart_")
WORD = re.compile(r"\b([a-z][a-z0-9]*(?:_[a-z0-9]+)+)\b")
# `{{ restart_policy | default(...) }}`: an extra var a default reads.
EXTRA_VAR = re.compile(r"\{\{\s*([a-z_][a-z0-9_]*)\s*\|\s*default\(")


def _yaml(path: Path):
    return yaml.safe_load(path.read_text())


def _walk(node):
    """Every (key, value) pair of a YAML document, at any depth."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            yield from _walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item)


def _task_files() -> list[Path]:
    files = [p for p in (REPO / "roles").rglob("*.yml") if "molecule" not in p.parts]
    return files + sorted((REPO / "playbooks").glob("*.yml")) + [REPO / "site.yml"]


def _knobs() -> set[str]:
    names: set[str] = set()
    for role in (REPO / "roles").iterdir():
        for part in ("defaults", "vars"):
            path = role / part / "main.yml"
            if path.is_file():
                defaults = _yaml(path) or {}
                names |= set(defaults)
                names |= set(EXTRA_VAR.findall(path.read_text()))
        specs = role / "meta" / "argument_specs.yml"
        if specs.is_file():
            for entry in _yaml(specs)["argument_specs"].values():
                names |= set(entry.get("options") or {})
    for path in (REPO / "inventory").rglob("*.yml"):
        names |= {key for key, _ in _walk(_yaml(path)) if isinstance(key, str)}
    return names


def _other_names() -> set[str]:
    """Names a message may use that are not knobs."""
    names = set(ROLES) | {p.stem for p in (REPO / "library").glob("*.py")}
    names |= {p.name for p in (REPO / "gate").iterdir() if p.is_dir()}
    for path in (REPO / "plugins" / "filter").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name == "filters":
                names |= {key.value for d in ast.walk(node) if isinstance(d, ast.Dict)
                          for key in d.keys if isinstance(key, ast.Constant)}
    names |= {p.stem for p in (REPO / "plugins" / "module_utils").rglob("*.py")}
    for path in _task_files():
        for key, value in _walk(_yaml(path)):
            if key == "register" and isinstance(value, str):
                names.add(value)
            elif key == "ansible.builtin.set_fact" and isinstance(value, dict):
                names |= set(value)
            elif key == "tags":
                names |= set(value if isinstance(value, list) else [value])
    return names


def _messages():
    for path in sorted((REPO / "plugins").rglob("*.py")) + sorted((REPO / "library").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and " " in node.value:
                yield path, node.lineno, node.value
    for path in _task_files():
        for key, value in _walk(_yaml(path)):
            if key in ("msg", "fail_msg") and isinstance(value, str):
                yield path, 0, value


def _unknown_knobs():
    known = _knobs() | _other_names()
    found = []
    for path, line, text in _messages():
        for word in WORD.findall(text):
            if word.startswith(KNOB_PREFIXES) and word not in known:
                found.append(f"{path.relative_to(REPO)}:{line}: {word}")
    return found


def test_the_scan_reads_messages_and_knobs():
    # The refusal that once named two missing knobs is among the messages read.
    texts = [text for _, _, text in _messages()]
    assert any("gate_service_max_hold_s" in text for text in texts)
    assert {"gate_service_max_hold_s", "vllm_restart_expected_s", "restart_policy"} <= _knobs()


def test_every_knob_a_message_names_exists():
    assert _unknown_knobs() == []


@pytest.mark.parametrize("made_up", ["gate_service_max_holdd_s", "vllm_fleet_no_such_knob"])
def test_a_made_up_knob_is_caught(made_up, monkeypatch):
    real = _messages

    def with_one_more():
        yield from real()
        yield REPO / "plugins" / "module_utils" / "made_up.py", 1, f"Raise {made_up} and run again"

    monkeypatch.setattr(sys.modules[__name__], "_messages", with_one_more)
    assert _unknown_knobs() == [f"plugins/module_utils/made_up.py:1: {made_up}"]
