"""Integration tests run the real playbooks against the lab.

They need the lab up (`make lab-up`, which `make test` does) and are skipped
unless VLLM_FLEET_LAB=1, so `pytest tests/unit` stays fast and hermetic.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
# lab/traffic/shapes.py: the project's traffic shapes (issue 39), sent by the tests as an application.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lab" / "traffic"))

import labbudget  # noqa: E402
from labtools import REPO, on_host, run_playbook  # noqa: E402

# Every playbook run of the lab phase logs here (ansible-runner, molecule and the
# shell all inherit the variable): its task timestamps say where a run's time
# went, and its process ids count the runs (budget.toml).
ANSIBLE_LOG = REPO / ".cache" / "lab-ansible.log"


def pytest_configure(config):
    # Not for a session that only collects: it would empty the log of a run going on.
    if config.option.collectonly:
        return
    if os.environ.get("VLLM_FLEET_LAB") == "1" and "ANSIBLE_LOG_PATH" not in os.environ:
        ANSIBLE_LOG.parent.mkdir(exist_ok=True)
        ANSIBLE_LOG.write_text("")
        os.environ["ANSIBLE_LOG_PATH"] = str(ANSIBLE_LOG)


def pytest_collection_modifyitems(config, items):
    if os.environ.get("VLLM_FLEET_LAB") == "1":
        return
    skip = pytest.mark.skip(
        reason="lab tests need the lab: run `make lab-up` and set VLLM_FLEET_LAB=1 (make test does both)")
    for item in items:
        if "integration" in str(item.fspath):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def play():
    return run_playbook




# How long each lab phase took: a table at the end of every lab run (make
# test prints it; docs/lab.md keeps the latest figures).
_PHASES: dict[str, float] = {}
_TESTS: dict[str, float] = {}
# The budget's verdict, from pytest_sessionfinish (which may still fail the session)
# for pytest_terminal_summary, which runs inside it, to print.
_BUDGET: dict = {}


# The counts as each test file began (None where a host did not answer), and at the
# end: where the budget went, file by file.
_FILE_COUNTS: list[tuple[str, dict | None]] = []


def pytest_runtest_setup(item):
    if os.environ.get("VLLM_FLEET_LAB") != "1":
        return
    stem = Path(item.nodeid.partition("::")[0]).stem
    if not _FILE_COUNTS or _FILE_COUNTS[-1][0] != stem:
        try:
            counts = lab_counts()
        except (OSError, ValueError, subprocess.SubprocessError):
            counts = None
        _FILE_COUNTS.append((stem, counts))


def _counts_by_file(end: dict) -> list[str]:
    marks = _FILE_COUNTS + [("", end)]
    lines = []
    for (stem, start), (_, stop) in zip(marks, marks[1:]):
        spent = ("?" if start is None or stop is None else stop[key] - start[key] for key in labbudget.COUNTS)
        lines.append(f"{stem:<48} " + "  ".join(f"{n:>5}" for n in spent))
    return lines


def pytest_runtest_logreport(report):
    path, _, name = report.nodeid.partition("::")
    phase = Path(path).stem
    if phase == "test_molecule":  # one phase per role's scenario
        phase = f"test_molecule[{name.partition('[')[2].rstrip(']')}]"
    _PHASES[phase] = _PHASES.get(phase, 0.0) + report.duration
    _TESTS[report.nodeid] = _TESTS.get(report.nodeid, 0.0) + report.duration


def _lab_ran(config) -> bool:
    # Not on an xdist worker: the controller measures once, after every test.
    return bool(_PHASES) and os.environ.get("VLLM_FLEET_LAB") == "1" and not hasattr(config, "workerinput")


def pytest_sessionfinish(session):
    """Check the lab's counts against budget.toml; one over fails the session, even
    when every test passed, and so does a count that could not be measured."""
    if not _lab_ran(session.config):
        return
    _BUDGET.update(lines=[], failure=None)
    try:
        measured = {**lab_counts(), labbudget.MINUTES: sum(_PHASES.values()) / 60}
        verdict = labbudget.check(measured, labbudget.load_budget())
    except labbudget.BudgetError as err:
        _BUDGET["failure"] = f"lab budget check failed: {err}"
    except (OSError, ValueError, subprocess.SubprocessError) as err:
        _BUDGET["failure"] = f"lab budget check failed: the counts could not be measured: {err!r}"
    else:
        by_file = _counts_by_file({key: measured[key] for key in labbudget.COUNTS})
        failure = verdict.message
        if failure:
            # Where the counts went, in the message itself: a log cut short keeps its end.
            failure += "; by file (boots, Ray, runs): " + ", ".join(" ".join(line.split()) for line in by_file)
        _BUDGET.update(lines=verdict.lines, failure=failure, by_file=by_file)
    if _BUDGET["failure"] and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, config):
    if not _lab_ran(config):
        return
    write = terminalreporter.write_line
    terminalreporter.section("lab phase times")
    for phase, seconds in _PHASES.items():
        write(f"{phase:<48} {seconds / 60:6.1f} min  ({seconds:5.0f} s)")
    write(f"{'total':<48} {sum(_PHASES.values()) / 60:6.1f} min")
    if _BUDGET.get("by_file"):
        write(f"{'counts by file':<48} {'boots':>5}  {'Ray':>5}  {'runs':>5}")
        for line in _BUDGET["by_file"]:
            write(line)
    for line in _BUDGET.get("lines", []):
        write(line)
    # Every test of a minute or more, slowest first: what a phase's growth came from.
    slowest = sorted(((n, s) for n, s in _TESTS.items() if s >= 60), key=lambda kv: -kv[1])
    write("tests of 60 s or more: " + "; ".join(f"{nodeid.split('::')[-1]} {s:.0f} s" for nodeid, s in slowest))
    if _BUDGET.get("failure"):
        terminalreporter.write_sep("!", "lab budget", red=True)
        write(_BUDGET["failure"], red=True)


# A head's API server prints its arguments once per start; a headless rank (mp
# backend) runs no API server. systemd logs one "Started" per start of a unit.
_BOOTS = "journalctl -o cat --no-pager -u vllm.service | grep -c '^(APIServer pid=[0-9]*) .*non-default args:'"
_RAY_STARTS = "journalctl -o cat --no-pager -u ray.service | grep -c '^Started ray.service'"


def _journal_count(host: str, cmd: str) -> int:
    out = on_host(host, cmd).strip()
    # grep -c prints a number even when nothing matched: no number means no answer,
    # which must not pass for zero.
    if not out.isdigit():
        raise ValueError(f"{host} gave no count for {cmd!r}: {out!r}")
    return int(out)


def lab_counts() -> dict[str, int]:
    """The lab budget's counts for this run, by their keys in budget.toml: whole-engine boots
    and Ray starts (the engine hosts' persistent journals, which host-stop keeps) and
    playbook runs (Ansible's log)."""
    boots = rays = 0
    for host in ("lab1", "lab2"):
        boots += _journal_count(host, _BOOTS)
        rays += _journal_count(host, _RAY_STARTS)
    log = Path(os.environ.get("ANSIBLE_LOG_PATH", ANSIBLE_LOG))
    runs = labbudget.playbook_runs(log.read_text(errors="replace")) if log.is_file() else 0
    return {"engine_boots": boots, "ray_starts": rays, "playbook_runs": runs}
