"""The recovery as roles/engine_recovery installs it on an engine host: the files its
vars/main.yml lists (_engine_recovery_libs), copied as tasks/install.yml copies them,
and the runner files/vllm-fleet-recover, run by a plain Python with no Ansible and no
path to the repository. The host has none of the ``ansible.module_utils`` names the unit
tests import, so this is what proves the files import each other there."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[4]
ROLE = REPO / "roles" / "engine_recovery"
VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
INSTALL = {task["name"]: task for task in yaml.safe_load((ROLE / "tasks" / "install.yml").read_text())}
RUNNER = ROLE / "files" / "vllm-fleet-recover"


def test_the_install_task_copies_each_listed_file_to_the_same_path_below_the_lib_dir():
    copy = INSTALL["Install | Copy the logic"]["ansible.builtin.copy"]
    assert copy["src"] == "{{ role_path }}/../../plugins/module_utils/{{ item }}"
    assert copy["dest"] == "{{ _engine_recovery_lib_dir }}/{{ item }}"
    assert INSTALL["Install | Copy the logic"]["loop"] == "{{ _engine_recovery_libs }}"
    assert INSTALL["Install | Create the logic's directories"]["loop"] == "{{ _engine_recovery_lib_dirs }}"
    for lib in VARS["_engine_recovery_libs"]:
        assert (REPO / "plugins" / "module_utils" / lib).is_file(), lib
    # A retired path (removed from the lib dir) is never one the runner still needs.
    assert not set(VARS["_engine_recovery_libs"]) & set(VARS["_engine_recovery_retired_libs"])


def test_every_recovery_file_ships():
    """A file of the package that the role does not list would be missing on the host."""
    package = sorted(f"recovery/{p.name}" for p in (REPO / "plugins" / "module_utils" / "recovery").glob("*.py"))
    assert set(package) <= set(VARS["_engine_recovery_libs"])


def test_every_folder_ships_as_a_package():
    """A folder without its __init__.py would be a namespace package on the host, which a
    module of the same name elsewhere on the host's path would shadow."""
    folders = {str(Path(lib).parent) for lib in VARS["_engine_recovery_libs"]}
    assert {f"{folder}/__init__.py" for folder in folders} <= set(VARS["_engine_recovery_libs"])


@pytest.fixture
def host(tmp_path):
    """A lib dir and a runner laid out as the role lays them out, the runner pointed at it."""
    lib = tmp_path / "lib"
    for item in VARS["_engine_recovery_libs"]:
        (lib / item).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / "plugins" / "module_utils" / item, lib / item)
    text = RUNNER.read_text()
    assert text.count(f'"{VARS["_engine_recovery_lib_dir"]}"') == 1
    runner = tmp_path / "vllm-fleet-recover"
    runner.write_text(text.replace(f'"{VARS["_engine_recovery_lib_dir"]}"', repr(str(lib))))
    return tmp_path, lib, runner


def plain_python(*args, cwd):
    # -I: no PYTHONPATH, no user site, not the script's folder; -S: not the venv's site-packages
    # either (the venv has Ansible, the host's python3 need not).
    return subprocess.run([sys.executable, "-I", "-S", *map(str, args)], capture_output=True, text=True,
                          timeout=60, cwd=cwd, check=False)


def test_the_installed_files_import_each_other_without_ansible(host):
    tmp_path, lib, _ = host
    probe = (f"import sys; sys.path.insert(0, {str(lib)!r})\n"
             "import recovery.host_io as h\n"
             "assert not [m for m in sys.modules if m == 'ansible' or m.startswith('ansible.')]\n"
             "import host.ray_cluster as r\n"
             "print(h.__file__); print(r.__file__); print(h.PROBE.splitlines()[0]); print(h.main.__module__)\n")
    proc = plain_python("-c", probe, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    path, ray_path, probe_line, module = proc.stdout.splitlines()
    assert Path(path) == lib / "recovery" / "host_io.py"
    assert Path(ray_path) == lib / "host" / "ray_cluster.py"
    assert probe_line == "import json, sys, ray"
    assert module == "recovery.host_io"
    assert plain_python("-c", "import ansible", cwd=tmp_path).returncode != 0


@pytest.mark.parametrize(("args", "said"), [
    (["sideways"], "usage: vllm-fleet-recover boot|check [--config PATH]"),
    (["check", "--config", "{tmp}/absent.json"], "no {tmp}/absent.json: the role engine_recovery writes it"),
    (["boot", "--config", "{tmp}/recover.json"], "{tmp}/recover.json: recover.json lacks engine, role, backend"),
])
def test_the_runner_runs_its_entry_point_there(host, args, said):
    tmp_path, _, runner = host
    (tmp_path / "recover.json").write_text('{"peers": []}')
    proc = plain_python(runner, *(a.format(tmp=tmp_path) for a in args), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.startswith(said.format(tmp=tmp_path)), proc.stdout
