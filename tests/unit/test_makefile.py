"""`make test` runs every lab test file, in the order the Makefile gives."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_every_integration_test_file_is_run_by_make_test():
    makefile = (REPO / "Makefile").read_text()
    # The value may continue over backslash-newlines.
    value = re.search(r"^LAB_TESTS := ((?:.*\\\n)*.*)$", makefile, re.M).group(1)
    listed = value.replace("\\\n", " ").split()
    present = sorted(str(p.relative_to(REPO)) for p in (REPO / "tests" / "integration").glob("test_*.py"))
    assert sorted(listed) == present, "LAB_TESTS in the Makefile must list every tests/integration/test_*.py"


def test_make_test_includes_the_lab():
    """lint, syntax and the unit tests, with the lab's build in the background; then the lab
    end to end, only once they all passed (a failure exits the recipe's first line)."""
    makefile = (REPO / "Makefile").read_text()
    recipe = re.search(r"^test: .*\n((?:\t.*\n)+)", makefile, re.M).group(1)
    first, *rest = recipe.replace("\\\n", " ").splitlines()[2:]
    assert re.search(r"\{ \$\(MAKE\) --no-print-directory lab-deps lab-build >\S+ 2>&1 & \}; build=\$\$!", first)
    assert "$(MAKE) --no-print-directory lint syntax unit || rc=$$?" in first
    assert "if wait $$build; then" in first and first.rstrip().endswith("exit $$rc")
    assert rest == ["\t@$(MAKE) --no-print-directory lab-e2e"]


def _help_targets() -> set[str]:
    text = (REPO / "Makefile").read_text() + (REPO / "lab" / "lab.mk").read_text()
    return set(re.findall(r"(?m)^([a-z0-9-]+):.*## ", text))


def test_make_help_lists_every_target_the_docs_name():
    docs = [REPO / "README.md", *(REPO / "docs").glob("*.md"), REPO / "lab" / "README.md"]
    named = {m for doc in docs for m in re.findall(r"`make ([a-z][a-z0-9-]*[a-z0-9])\b(?!-\*)", doc.read_text())}
    assert named, "the docs name no make target"
    assert named - _help_targets() == set(), "named in the docs but missing from `make help`"


def test_ansible_cfg_names_only_paths_that_exist():
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(REPO / "ansible.cfg")
    for key in ("library", "module_utils", "filter_plugins", "callback_plugins", "roles_path", "inventory"):
        value = cfg["defaults"].get(key)
        if value:
            for path in value.split(":"):
                assert (REPO / path).exists(), f"ansible.cfg {key} = {path}, which does not exist"


def test_ansible_cfg_sets_no_default_inventory():
    """A command without -i reaches no host, never the lab's (README.md, "The inventory in every command")."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(REPO / "ansible.cfg")
    assert "inventory" not in cfg["defaults"], "ansible.cfg must not set a default inventory"


# Where the docs and the toolkit show commands: the docs, the playbooks' header
# comments, the Makefile, the lab's scripts and the benchmarks.
COMMAND_FILES = sorted({REPO / "README.md", REPO / "Makefile", REPO / "lab" / "lab.mk",
                        REPO / "lab" / "README.md", REPO / "inventory" / "example" / "README.md",
                        *(REPO / "docs").glob("*.md"), REPO / "site.yml", *(REPO / "playbooks").glob("*.yml"),
                        *(REPO / "lab" / "playbooks").glob("*.yml"), *(REPO / "lab" / "lib").glob("*.sh"),
                        *(REPO / "bench").glob("*.py")})
# ansible-playbook up to its first playbook (within one code span or line, over
# backslash-newlines and comment continuations); ansible with a host pattern
# (localhost needs none: the modules run on the controller).
PLAYBOOK_COMMAND = re.compile(r"ansible-playbook\"?,?(?:[\s#]+[^\s`|#\"]+){0,8}?[\s#]+\"?[^\s`|#\"]*\.yml\b")
AD_HOC_COMMAND = re.compile(r"\bansible (all|lab\d|vllm_engines|gate|consumers)\b[^`\n]*")


def _commands(text: str) -> list[str]:
    text = text.replace("\\\n", " ")
    return [m.group(0) for m in PLAYBOOK_COMMAND.finditer(text)] + [m.group(0) for m in AD_HOC_COMMAND.finditer(text)]


def test_the_command_pattern_finds_commands():
    assert _commands("run `ansible-playbook playbooks/verify.yml` now") == ["ansible-playbook playbooks/verify.yml"]
    assert _commands("#   ansible-playbook -i inventory/<site> \\\n#     playbooks/x.yml") != []
    assert _commands("$(BIN)/ansible-playbook site.yml") == ["ansible-playbook site.yml"]
    assert _commands('[PLAYBOOK, "-v", "site.yml"]') == []
    assert _commands("`ansible-playbook`'s process group, `rolling-restart.yml`") == []
    assert _commands(".venv/bin/ansible all -m ansible.builtin.ping") == ["ansible all -m ansible.builtin.ping"]


@pytest.mark.parametrize("path", COMMAND_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_command_shown_names_its_inventory(path):
    """ansible.cfg has no default inventory: a command shown without -i reaches no host."""
    missing = [c for c in _commands(path.read_text()) if not re.search(r"(^|\s)(-i|--inventory)\s", c)]
    assert missing == [], f"{path.relative_to(REPO)}: commands without -i inventory/<site> (or inventory/lab)"
