"""Helpers the lab tests share: run a playbook as an operator would, and the
lab's own commands."""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LAB_INVENTORY = REPO / "inventory" / "lab" / "hosts.yml"
# The report site.yml writes on the controller (playbooks/report.yml).
SITE_REPORT = REPO / "reports" / "site-report.json"
LAB_ENGINE_VARS = REPO / "inventory" / "lab" / "group_vars" / "vllm_engines" / "engine.yml"
LAB_SECRETS = REPO / "inventory" / "lab" / "group_vars" / "all" / "secrets.yml"


def lab_secrets() -> dict:
    """The lab's keys (the engines', the gate's clients', the gate's admin token): every
    client a test runs carries them, and test_security.py looks for them in all output."""
    import yaml

    return yaml.safe_load(LAB_SECRETS.read_text())


def engine_key() -> str:
    return lab_secrets()["vllm_server_api_key"]


def secret_values() -> list[str]:
    """Every secret value the lab plants."""
    values = []
    for value in lab_secrets().values():
        values += value if isinstance(value, list) else [value]
    return values


def files_holding(root: Path, values: list[str]) -> list[str]:
    """Files under ``root`` whose bytes hold any of ``values``."""
    needles = [v.encode() for v in values]
    return sorted(str(p) for p in root.rglob("*") if p.is_file() and any(n in p.read_bytes() for n in needles))


# Every ansible-runner private dir this process used (artifacts/<ident>/:
# stdout, job_events, command with the whole environment): test_security.py
# greps them all.
RUNNER_DIRS: list[Path] = []


@dataclass
class PlayResult:
    rc: int
    stats: dict
    stdout: str

    def changed(self) -> dict:
        return {h: n for h, n in self.stats.get("changed", {}).items() if n}

    def failed_hosts(self) -> set:
        return set(self.stats.get("failures", {})) | set(self.stats.get("dark", {}))


def play_env() -> dict:
    """What a playbook run needs on top of the environment: the repo's ansible.cfg, plain
    output, and the venv's tools first on PATH."""
    return {
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_FORCE_COLOR": "0",
        "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}",
    }


def run_playbook(playbook: str, *args: str, extravars: dict | None = None, timeout: int = 1800,
                 inventory: Path = LAB_INVENTORY) -> PlayResult:
    """Run a playbook from the repository root with ansible-runner, as an
    operator would run ansible-playbook, and return rc, stats and output."""
    import ansible_runner

    args = list(args)
    env = play_env()
    # A fresh private dir per run: ansible-runner reads env/cmdline and
    # env/extravars left there by an earlier run.
    (REPO / ".cache").mkdir(exist_ok=True)
    private = Path(tempfile.mkdtemp(prefix="runner-", dir=REPO / ".cache"))
    RUNNER_DIRS.append(private)
    if extravars:
        # In the run's own private dir (mode 0700), removed with it: not one file per run left in /tmp.
        path = private / "extravars-cli.json"
        path.write_text(json.dumps(extravars))
        args += ["-e", "@" + str(path)]
    cmdline = " ".join(shlex.quote(a) for a in args)
    r = ansible_runner.run(
        private_data_dir=str(private),
        project_dir=str(REPO),
        playbook=str(REPO / playbook),
        inventory=str(inventory),
        cmdline=cmdline or None,
        envvars=env,
        quiet=True,
        timeout=timeout,
        json_mode=False,
    )
    stdout = r.stdout.read()
    print(stdout[-20000:])
    return PlayResult(rc=r.rc, stats=r.stats or {}, stdout=stdout)


def restart(play, tmp_path: Path, *args: str, inventory: Path = LAB_INVENTORY, **extravars):
    """playbooks/rolling-restart.yml through the ``play`` fixture, its JSON report in
    ``tmp_path``: the run, and the report (None when the run wrote none)."""
    report = tmp_path / "restart.json"
    r = play("playbooks/rolling-restart.yml", *args, extravars=dict(extravars, vllm_restart_report_path=str(report)),
             inventory=inventory)
    return r, (json.loads(report.read_text()) if report.exists() else None)


def start_playbook(playbook: str, *args: str, out: Path, inventory: Path = LAB_INVENTORY) -> subprocess.Popen:
    """Start ansible-playbook in the background as an operator's shell would, its output
    to ``out``, in a session of its own: ``interrupt`` then sends SIGINT to its process
    group, as Ctrl-C does."""
    with out.open("w") as fh:
        return subprocess.Popen([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(inventory), playbook,
                                 *args],
                                cwd=REPO, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, **play_env()})


def interrupt(run: subprocess.Popen, grace: float = 2.0, presses: int = 3) -> int:
    """Ctrl-C: SIGINT to the playbook's whole process group, pressed again, as an operator
    would, while the run is still going ``grace`` seconds later; returns the presses it took.
    ansible-playbook (core 2.19) can lose a first Ctrl-C: seen twice in the lab, the run went on
    to its end and exited 0. Its handler re-arms SIGINT's default before it raises, so a second
    press stops the run for certain (killed by SIGINT, without the "User interrupted" line).
    The grace is short: direct-cutover.yml ends 11 s after it rewrites the endpoint file, and a
    second press 10 s after a lost first one came too late once (2026-12-05)."""
    for press in range(1, presses + 1):
        os.killpg(run.pid, signal.SIGINT)
        try:
            run.wait(timeout=grace)
            return press
        except subprocess.TimeoutExpired:
            continue
    return presses


# ansible-core 2.19's strategy closes a finished worker process, then starts its replacement in
# the same slot; a Ctrl-C between the two leaves the closed one in the list, and the cleanup
# then raises (seen once in CI): "Unexpected Exception, this is probably a bug: process object
# is closed", exit 250. The run still stopped where the Ctrl-C found it.
ANSIBLE_CLOSED_WORKER_RC = 250
ANSIBLE_CLOSED_WORKER = "process object is closed"


def was_interrupted(rc: int, text: str) -> bool:
    """Whether a run stopped by ``interrupt`` ended as an interrupted run does: Ansible's own
    exit (99, "User interrupted execution"), its cleanup's crash over a closed worker (250, see
    ANSIBLE_CLOSED_WORKER) or, after a second press, killed by SIGINT."""
    return ((rc != 0 and "User interrupted execution" in text)
            or (rc == ANSIBLE_CLOSED_WORKER_RC and ANSIBLE_CLOSED_WORKER in text)
            or rc == -signal.SIGINT)


def finish(run: subprocess.Popen, timeout: float = 900) -> int:
    """Wait for a started playbook and return its exit status; past ``timeout`` kill its
    process group and return -9 (the test then fails on the status and the output)."""
    try:
        return run.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        return run.wait()


def plain(result: PlayResult) -> str:
    """The play's output as one line: no colours, every run of whitespace one space (the YAML
    callback wraps long lines anywhere and colours each piece)."""
    return " ".join(re.sub(r"\x1b\[[0-9;]*m", "", result.stdout).split())


def said(result: PlayResult, text: str) -> bool:
    """Whether the play printed ``text``, however the callback wrapped and coloured it."""
    return " ".join(text.split()) in plain(result)


def lab_sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([str(REPO / "lab" / "lab.sh"), *args], check=check, capture_output=True, text=True,
                          timeout=600)


def on_host(host: str, cmd: str) -> str:
    """Run a shell command on a lab host over ssh; return its stdout."""
    return lab_sh("ssh", host, cmd, check=False).stdout


def engine_metrics(base_url: str = "http://10.200.0.11:8000") -> dict:
    """running, waiting and preemptions from an engine head's /metrics, summed over its series
    (no key: vLLM's --api-key guards /v1 only)."""
    import urllib.request

    text = urllib.request.urlopen(base_url + "/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:num_preemptions_total"):
            if line.startswith(name + "{"):
                out[name.split(":")[1]] = out.get(name.split(":")[1], 0) + float(line.rsplit(" ", 1)[1])
    return out


def invocation(host: str, unit: str) -> str:
    """The unit's InvocationID: it changes with every start."""
    return on_host(host, f"systemctl show -p InvocationID --value {unit}").strip()


RECOVERY_MARKER = "/var/lib/vllm-fleet/engine-wanted"


def stop_engines() -> None:
    """Stop the lab's engines on purpose, so the next converge may give their hosts another
    shape (docs/provisioning.md: moving a host between engines): the engine-wanted marker
    first (the power-cut recovery leaves a stopped engine alone, and stops a run under way),
    then vLLM and Ray. The next engine play that proves an engine ready writes the marker."""
    for host in ("lab1", "lab2"):
        on_host(host, f"rm -f {RECOVERY_MARKER}; systemctl stop vllm-fleet-recover.service"
                      " vllm-fleet-recover-check.service vllm.service ray.service")


# Whether this pytest run installed the lab's consumer application (consumer_app).
_CONSUMER_APP_INSTALLED: list[bool] = []


def consumer_app(play) -> None:
    """The lab's consumer application on lab3 (lab/playbooks/consumer-app.yml): installed
    by the first file of a pytest run that needs it. A later file finds the files this run
    copied and the fallback model it started (a file that stops the fallback starts it
    again), and runs the playbook again only when they are gone."""
    if _CONSUMER_APP_INSTALLED and on_host(
            "lab3", "test -f /opt/vllm-fleet/consumer/session_client.py"
                    " && systemctl is-active vllm-fleet-fallback.service").strip() == "active":
        return
    assert play("lab/playbooks/consumer-app.yml").rc == 0, "the lab's consumer application did not install"
    _CONSUMER_APP_INSTALLED.append(True)


def lab_args(**extra) -> dict:
    """The lab's own vllm_server_args plus ``extra``: -e replaces the whole dict."""
    import yaml

    args = dict(yaml.safe_load(LAB_ENGINE_VARS.read_text())["vllm_server_args"])
    args.update(extra)
    return {"vllm_server_args": args}


# The lab's hub: lab/hub/fake_hub.py on lab3 (every lab host mounts the tiny model), serving it
# as HUB_REPO at two commits. The second adds a 16 MiB file, so that a cut past 12 MiB lands
# after hf's first whole 10 MiB chunk and hf resumes it with a Range request in the same run.
HUB_HOST, HUB_ADDRESS, HUB_PORT = "lab3", "10.200.0.13", 8090
HUB_REPO = "lab/tiny"
HUB_A = "0123456789abcdef0123456789abcdef01234567"
HUB_B = "89abcdef0123456789abcdef0123456789abcdef"
HUB_CUT = 12 * 1024 * 1024
HUB_LOG = "/var/log/lab-hub.jsonl"
# The hub models' parent on the engine hosts (the lab's /srv/models is a read-only mount).
HUB_MODELS = "/var/lib/vllm-fleet/models"


def hub_vars(revision: str) -> dict:
    """The extravars that make the engines download HUB_REPO at ``revision`` from the lab's hub;
    the token is the inventory's (vllm_install_hf_token, inventory/lab's secrets.yml)."""
    return {"vllm_install_model_source": f"hub:{HUB_REPO}", "vllm_install_model_revision": revision,
            "vllm_install_model_dir": HUB_MODELS, "vllm_install_hf_endpoint": f"http://{HUB_ADDRESS}:{HUB_PORT}"}


def hub_folder(revision: str) -> str:
    return f"{HUB_MODELS}/{HUB_REPO.replace('/', '--')}/{revision}"


def put_file(host: str, path: str, content: str, mode: str = "0644") -> None:
    """Write ``content`` to ``path`` on a lab host over ssh (never on a command line)."""
    subprocess.run([str(REPO / "lab" / "lab.sh"), "ssh", host,
                    f"mkdir -p {shlex.quote(os.path.dirname(path))} && umask 077 && cat > {shlex.quote(path)}"
                    f" && chmod {mode} {shlex.quote(path)}"],
                   input=content, text=True, check=True, capture_output=True, timeout=60)


def fake_hub_up(cut_after: int | None = None) -> None:
    """(Re)start the lab's hub on HUB_HOST as a transient unit, its token read from a file on
    /run (so neither ps, the journal nor test_security.py's paths hold it), and wait until it
    answers. ``cut_after``: cut the first GET of the largest file once, after that many bytes."""
    fake_hub_down()
    # fake_hub.py and what it imports from beside it (lab_http.py).
    for path in sorted((REPO / "lab" / "hub").glob("*.py")):
        put_file(HUB_HOST, f"/opt/lab-hub/{path.name}", path.read_text())
    put_file(HUB_HOST, "/run/lab-hub/token", lab_secrets()["vllm_install_hf_token"] + "\n", mode="0600")
    b = "/var/lib/lab-hub/b"
    on_host(HUB_HOST, f"mkdir -p {b} && ln -sf /srv/models/tiny/* {b}/ &&"
                      f" {{ [ -s {b}/padding.bin ] || head -c 16777216 /dev/zero > {b}/padding.bin; }}")
    argv = ["systemd-run", "--unit=lab-fake-hub", "--description=the lab's hub", "--collect",
            "python3", "/opt/lab-hub/fake_hub.py", "--repo", HUB_REPO, "--revision", f"{HUB_A}=/srv/models/tiny",
            "--revision", f"{HUB_B}={b}", "--token-file", "/run/lab-hub/token",
            "--bind", HUB_ADDRESS, "--port", str(HUB_PORT), "--log", HUB_LOG]
    if cut_after is not None:
        argv += ["--cut-after", str(cut_after)]
    on_host(HUB_HOST, shlex.join(argv))
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"http://{HUB_ADDRESS}:{HUB_PORT}/api/agent-harnesses", timeout=2).read()
            return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise AssertionError("the lab's hub did not answer in 30 s: "
                                     + on_host(HUB_HOST, "journalctl -u lab-fake-hub --no-pager -n 20")) from exc
            time.sleep(0.2)


def fake_hub_down() -> None:
    on_host(HUB_HOST, "systemctl stop lab-fake-hub.service 2>/dev/null; true")


def hub_requests(since: float = 0.0) -> list[dict]:
    """The lab hub's request log (lab/hub/README.md) from ``since`` (Unix time) on."""
    lines = on_host(HUB_HOST, f"cat {HUB_LOG} 2>/dev/null").splitlines()
    return [r for r in (json.loads(line) for line in lines if line.strip()) if r["ts"] >= since]
