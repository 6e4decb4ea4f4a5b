"""`make test` runs every lab test file, in the order the Makefile gives."""
from __future__ import annotations

import re
from pathlib import Path

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
