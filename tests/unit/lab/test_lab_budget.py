"""The lab budget (tests/integration/budget.toml): the check in labbudget.py, table-driven,
and its wiring into the lab's conftest, which fails a lab session over budget."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

INTEGRATION = Path(__file__).resolve().parents[2] / "integration"
if str(INTEGRATION) not in sys.path:
    sys.path.insert(0, str(INTEGRATION))

import labbudget  # noqa: E402
from labbudget import BudgetError  # noqa: E402

SHOWN = "tests/integration/budget.toml"
BUDGET = labbudget.Budget({"engine_boots": 25, "ray_starts": 53, "playbook_runs": 87}, 63.4,
                          labbudget.BUDGET_FILE)
AT = {"engine_boots": 25, "ray_starts": 53, "playbook_runs": 87}


@pytest.mark.parametrize("measured, over", [
    pytest.param(AT, [], id="exactly-at-budget"),
    pytest.param({"engine_boots": 0, "ray_starts": 1, "playbook_runs": 86}, [], id="under"),
    pytest.param({**AT, "engine_boots": 27}, [f"engine boots 27 > budget 25 ({SHOWN})"], id="boots-over"),
    pytest.param({**AT, "ray_starts": 54, "playbook_runs": 100},
                 [f"Ray starts 54 > budget 53 ({SHOWN})", f"playbook runs 100 > budget 87 ({SHOWN})"],
                 id="two-over"),
    pytest.param({**AT, "lab_minutes": 90.0}, [], id="minutes-over-never-fail"),
    pytest.param({**AT, "lab_minutes": None}, [], id="minutes-not-measured"),
])
def test_each_count_against_its_budget(measured, over):
    verdict = labbudget.check(measured, BUDGET)
    assert verdict.over == over
    if over:
        assert verdict.message == ("lab budget exceeded: " + "; ".join(over) + "; raise a budget only in a commit "
                                   'of its own that says which proof needs it (docs/lab.md, "The budget")')
    else:
        assert verdict.message is None


def test_the_lines_put_each_count_against_its_budget_and_the_minutes_for_information():
    verdict = labbudget.check({**AT, "engine_boots": 27, "lab_minutes": 70.04}, BUDGET)
    assert verdict.lines == [
        f"{'engine boots':<48}     27  (budget 25: over)",
        f"{'Ray starts':<48}     53  (budget 53)",
        f"{'playbook runs':<48}     87  (budget 87)",
        f"{'lab minutes':<48}   70.0  (budget 63.4, for information: minutes depend on the machine)",
    ]


def test_without_minutes_there_is_no_minutes_line():
    assert [line.split()[0] for line in labbudget.check(AT, BUDGET).lines] == ["engine", "Ray", "playbook"]


@pytest.mark.parametrize("measured, message", [
    pytest.param({"ray_starts": 1, "playbook_runs": 1},
                 f"the lab run did not measure engine_boots, which {SHOWN} budgets", id="boots-missing"),
    pytest.param({"engine_boots": 1, "playbook_runs": 1},
                 f"the lab run did not measure ray_starts, which {SHOWN} budgets", id="ray-missing"),
    pytest.param({"engine_boots": 1, "ray_starts": 1},
                 f"the lab run did not measure playbook_runs, which {SHOWN} budgets", id="runs-missing"),
    pytest.param({}, f"the lab run did not measure engine_boots, which {SHOWN} budgets", id="nothing"),
    pytest.param({**AT, "ray_starts": None}, f"the lab run measured ray_starts as None, not a count ({SHOWN})",
                 id="none"),
    pytest.param({**AT, "ray_starts": -1}, f"the lab run measured ray_starts as -1, not a count ({SHOWN})",
                 id="negative"),
    pytest.param({**AT, "ray_starts": 2.0}, f"the lab run measured ray_starts as 2.0, not a count ({SHOWN})",
                 id="float"),
    pytest.param({**AT, "ray_starts": True}, f"the lab run measured ray_starts as True, not a count ({SHOWN})",
                 id="bool"),
])
def test_a_count_not_measured_is_an_error_never_a_pass(measured, message):
    with pytest.raises(BudgetError) as err:
        labbudget.check(measured, BUDGET)
    assert str(err.value) == message


GOOD = "engine_boots = 25\nray_starts = 53\nplaybook_runs = 87\nlab_minutes = 63.4\n"


def _without(key: str) -> str:
    return "".join(line + "\n" for line in GOOD.splitlines() if not line.startswith(key + " "))


@pytest.mark.parametrize("text, message", [
    pytest.param(_without("engine_boots"), "engine_boots is missing", id="boots-missing"),
    pytest.param(_without("ray_starts"), "ray_starts is missing", id="ray-missing"),
    pytest.param(_without("playbook_runs"), "playbook_runs is missing", id="runs-missing"),
    pytest.param(_without("lab_minutes"), "lab_minutes is missing", id="minutes-missing"),
    pytest.param(GOOD.replace("= 25", '= "25"'), "engine_boots must be a non-negative integer, not '25'",
                 id="string"),
    pytest.param(GOOD.replace("= 25", "= 25.0"), "engine_boots must be a non-negative integer, not 25.0",
                 id="float"),
    pytest.param(GOOD.replace("= 25", "= -1"), "engine_boots must be a non-negative integer, not -1",
                 id="negative"),
    pytest.param(GOOD.replace("= 53", "= true"), "ray_starts must be a non-negative integer, not True", id="bool"),
    pytest.param(GOOD.replace("= 87", "= [87]"), "playbook_runs must be a non-negative integer, not [87]",
                 id="list"),
    pytest.param(GOOD.replace("= 63.4", '= "63.4"'), "lab_minutes must be a non-negative number, not '63.4'",
                 id="minutes-string"),
    pytest.param(GOOD.replace("= 63.4", "= nan"), "lab_minutes must be a non-negative number, not nan",
                 id="minutes-nan"),
    pytest.param(GOOD.replace("= 63.4", "= -1.0"), "lab_minutes must be a non-negative number, not -1.0",
                 id="minutes-negative"),
    pytest.param(GOOD + "engine_boot = 20\n",
                 "unknown key engine_boot; the keys are engine_boots, ray_starts, playbook_runs, lab_minutes",
                 id="misspelt-key"),
    pytest.param(GOOD + "engine_boots = 20\n", "cannot read the lab budget: ", id="twice"),
    pytest.param("engine_boots = \n", "cannot read the lab budget: ", id="not-toml"),
])
def test_a_malformed_budget_is_an_error_naming_the_key_and_the_file(tmp_path, text, message):
    path = tmp_path / "budget.toml"
    path.write_text(text)
    with pytest.raises(BudgetError) as err:
        labbudget.load_budget(path)
    assert str(err.value).startswith(f"{path}: {message}")


def test_a_missing_budget_file_is_an_error(tmp_path):
    with pytest.raises(BudgetError, match=f"^{tmp_path / 'none.toml'}: cannot read the lab budget"):
        labbudget.load_budget(tmp_path / "none.toml")


def test_a_budget_file_elsewhere_is_named_by_its_path(tmp_path):
    path = tmp_path / "budget.toml"
    path.write_text(GOOD.replace("= 25", "= 0").replace("= 63.4", "= 1"))
    budget = labbudget.load_budget(path)
    assert budget.counts == {"engine_boots": 0, "ray_starts": 53, "playbook_runs": 87}
    assert budget.lab_minutes == 1.0
    assert labbudget.check({**AT, "engine_boots": 1}, budget).over == [f"engine boots 1 > budget 0 ({path})"]


def test_the_real_budget_file_loads_with_all_four_keys():
    import tomllib

    assert labbudget.BUDGET_FILE == INTEGRATION / "budget.toml"
    assert sorted(tomllib.loads(labbudget.BUDGET_FILE.read_text())) == sorted([*labbudget.COUNTS, "lab_minutes"])
    budget = labbudget.load_budget()
    assert budget.shown == SHOWN
    assert sorted(budget.counts) == sorted(["engine_boots", "ray_starts", "playbook_runs"])


# The lab's own hooks, in a pytest session of one test, with the counts made up: the
# session's exit status and output. Only the hooks that measure and judge are taken
# (pytest_configure would empty the lab's Ansible log of a run going on).
_WIRING = """
import importlib.util
spec = importlib.util.spec_from_file_location("lab_conftest", {conftest!r})
lab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lab)
lab.lab_counts = lambda: {counts!r}
pytest_runtest_setup = lab.pytest_runtest_setup
pytest_runtest_logreport = lab.pytest_runtest_logreport
pytest_sessionfinish = lab.pytest_sessionfinish
pytest_terminal_summary = lab.pytest_terminal_summary
"""


REAL = labbudget.load_budget().counts


def _real(**changes: int | None) -> dict:
    counts = dict(REAL, **changes)
    return {key: value for key, value in counts.items() if value is not None}


@pytest.mark.parametrize("counts, test_passes, lab, rc, shown, hidden", [
    pytest.param(_real(), True, "1", 0, ["lab phase times", "(budget ", "counts by file", "test_one     "],
                 ["lab budget exceeded"],
                 id="at-budget-passes"),
    pytest.param(_real(engine_boots=REAL["engine_boots"] + 1), True, "1", 1,
                 [f"engine boots {REAL['engine_boots'] + 1} > budget {REAL['engine_boots']} ({SHOWN})",
                  "in a commit of its own that says which proof needs it",
                  "; by file (boots, Ray, runs): test_one 0 0 0"], [],
                 id="over-fails-though-the-tests-passed"),
    pytest.param(_real(ray_starts=None), True, "1", 1,
                 [f"lab budget check failed: the lab run did not measure ray_starts, which {SHOWN} budgets"], [],
                 id="missing-count-fails"),
    pytest.param(_real(playbook_runs=10**6), False, "1", 1, [f"playbook runs 1000000 > budget {REAL['playbook_runs']}"],
                 [], id="over-and-a-test-failed"),
    pytest.param(_real(playbook_runs=10**6), True, "0", 0, [], ["lab phase times", "budget"], id="no-lab-no-check"),
])
def test_the_lab_session_fails_over_budget(tmp_path, counts, test_passes, lab, rc, shown, hidden):
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(_WIRING.format(conftest=str(INTEGRATION / "conftest.py"), counts=counts))
    (tmp_path / "test_one.py").write_text(f"def test_one():\n    assert {test_passes}\n")
    # The session under test is plain pytest, whatever options this one runs with.
    env = {key: value for key, value in os.environ.items() if key != "PYTEST_ADDOPTS"}
    env.update(VLLM_FLEET_LAB=lab, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", ANSIBLE_LOG_PATH=str(tmp_path / "ansible.log"))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    out = run.stdout + run.stderr
    assert run.returncode == rc, out
    for text in shown:
        assert text in out, out
    for text in hidden:
        assert text not in out, out


def _log_line(pid: int, text: str, second: int = 0) -> str:
    return f"2026-12-07 11:20:{second:02d},187 p={pid} u=root n=ansible INFO| {text}\n"


def _run(pid: int, plays: int = 2, recap: bool = True) -> str:
    lines = [_log_line(pid, f"PLAY [play {n}] ****") + _log_line(pid, "TASK [a task] ***") for n in range(plays)]
    return "".join(lines) + (_log_line(pid, "PLAY RECAP ****") if recap else "")


@pytest.mark.parametrize("log, runs", [
    pytest.param("", 0, id="empty"),
    pytest.param(_run(11), 1, id="one-run-of-two-plays"),
    pytest.param(_run(11) + _run(12), 2, id="two-runs"),
    # The kernel wrapped its process ids: the same id, a second run after the first's recap.
    pytest.param(_run(11) + _run(12) + _run(11), 3, id="a-process-id-handed-out-again"),
    # A run killed before its recap (an interrupted run) is one run still.
    pytest.param(_run(11, recap=False) + _run(12), 2, id="a-run-without-its-recap"),
    pytest.param(_log_line(11, "PLAY RECAP ****"), 0, id="a-recap-alone"),
    pytest.param(_log_line(11, "TASK [PLAY [not a play]] ***") + _log_line(11, "ok: [lab1] => PLAY ["), 0,
                 id="play-words-inside-other-lines"),
])
def test_the_runs_are_counted_from_ansibles_log(log, runs):
    assert labbudget.playbook_runs(log) == runs


@given(st.lists(st.tuples(st.integers(1, 4), st.integers(1, 3)), max_size=30))
def test_interleaved_runs_with_process_ids_reused_are_each_counted(runs):
    """Runs of a few process ids, each to its recap, two at a time interleaved line by line
    (Ansible's log as parallel runs write it): every run counts once."""
    log = "".join(_run(pid, plays) for pid, plays in runs)
    lines = log.splitlines(keepends=True)
    # Interleave with a second stream of its own ids, which never collide with the first.
    other = "".join(_run(100 + pid, plays) for pid, plays in runs).splitlines(keepends=True)
    mixed = "".join(a + b for a, b in zip(lines, other))
    assert labbudget.playbook_runs(log) == len(runs)
    assert labbudget.playbook_runs(mixed) == 2 * len(runs)


@given(st.text(alphabet=st.sampled_from(list(" p=0123456789u=rootn=ansibleINFO|PLAY[RECAP]\n")), max_size=2000))
def test_any_text_gives_a_count_and_nothing_else(text):
    """Hostile or damaged log text: a count, never an exception."""
    assert labbudget.playbook_runs(text) >= 0
