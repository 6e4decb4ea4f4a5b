"""The healing loop on the lab (roles/fleet_heal, playbooks/heal.yml, docs/watch.md): lab3's
Prometheus and Alertmanager (Debian's), and ansible-rulebook on the controller, which site.yml
set up (playbooks/watch.yml). The controller runs no systemd: the loop is started here by its
unit's ExecStart with its environment file, as systemd would start it.

Proofs 3 and 1, one test: the slow-prefill knob under the session client's load, put again on
every new engine process as soon as the restarted engine answers (a fault that comes back after
every restart). VllmPrefillDegraded fires; Alertmanager sends it to the loop; the loop runs the
rolling restart (when-degraded) for that engine; each restart diagnoses it degraded, keeps its
evidence, restarts it with the consumers on the fallback, reads it slower right after its start
(the known-good baseline kept) and again once settled: the cure ledger says not-cured. After
exactly the lab's budget of 2, the loop's next run is held back ("not cured by restart", the
reset command in it), nothing restarts after, and VllmNotCuredByRestart fires. Then the operator
resets the budget with the fault no longer coming back: the alert still fires, and the loop's
restart cures it, the ledger says cured (proof 1). Measured: the knob to the alert, to the hold,
and the reset to the cured line. The consumers lose nothing they would not lose by themselves to
a slowed engine (its own timeouts, then their fallback), and a when-degraded run afterwards skips
the healthy engine and changes nothing.

Proof 5: Prometheus killed; serving goes on, and the loop, which Alertmanager sends the heartbeat
every fleet_watch_heartbeat_period_s, says DEAD-MAN once none came for fleet_heal_deadman_timeout
(the waits derive from the lab inventory's values). (Proof 2, a wedge with
no traffic, is not in make test yet; proof 4, quiet, is test_watch.py's.)

Runs after test_upgrade.py and before test_restart.py: it finds the TP2 engine healthy with the
consumers on it, in direct mode, and leaves it so.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import tarfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from labtools import REPO, lab_sh, on_host, restart, said
from test_restart import ENGINE_URL, FALLBACK_URL, back_on_the_engine_with_nothing_lost, client  # noqa: F401
from test_serving_modes import CLIENT, client_records, now_ts, summary, wait_for

pytestmark = pytest.mark.lab

HEAL_DIR = REPO / ".cache" / "heal"
WEBHOOK = "http://10.200.0.1:5000/alerts"
PROMETHEUS = "http://10.200.0.13:9090/api/v1"
LEDGER = "/var/lib/vllm-fleet/cure-ledger.jsonl"
HEALTH = "http://10.200.0.11:8000/health"
ENGINE_HOSTS = ("lab1", "lab2")
BUDGET = 2  # inventory/lab: vllm_fleet_restart_budget
# The lab's watch timings (inventory/lab/group_vars), which proof 5 waits on.
LAB_VARS = {**yaml.safe_load((REPO / "inventory" / "lab" / "group_vars" / "all" / "fleet.yml").read_text()),
            **yaml.safe_load((REPO / "inventory" / "lab" / "group_vars" / "monitoring" / "watch.yml").read_text())}


def lab_seconds(name: str) -> int:
    """A lab inventory duration in seconds: Prometheus's (`5s`, `1m`) or ansible-rulebook's (`45 seconds`)."""
    n, unit = re.fullmatch(r"(\d+) ?([smh]|seconds?|minutes?|hours?)", str(LAB_VARS[name])).groups()
    return int(n) * {"s": 1, "m": 60, "h": 3600}[unit[0]]


HEARTBEAT_S = int(LAB_VARS["fleet_watch_heartbeat_period_s"])
DEADMAN_S = lab_seconds("fleet_heal_deadman_timeout")
# An alert Prometheus no longer sends stays active in Alertmanager this long after its last send
# (Prometheus's sendAlerts: 4 x max(resend delay, evaluation interval)): the heartbeat goes on so long.
LAST_SEND_VALID_S = 4 * max(lab_seconds("fleet_watch_alert_resend_delay"),
                            lab_seconds("fleet_watch_evaluation_interval"))


def unit_setting(unit: str, key: str) -> str:
    return re.search(rf"(?m)^{key}=(.*)$", unit).group(1)


class Loop:
    def __init__(self, proc: subprocess.Popen, log):
        self.proc, self.log = proc, log

    def text(self) -> str:
        return self.log.read_text()

    def stop(self) -> None:
        """The whole process group: a run the loop started goes with it."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)


@contextlib.contextmanager
def healing_loop(folder: Path):
    """ansible-rulebook by the unit's ExecStart, in its WorkingDirectory, with its Environment and
    EnvironmentFile only, as systemd would start it; its log in ``folder``. Stopped on the way out."""
    unit = (HEAL_DIR / "vllm-fleet-heal.service").read_text()
    env = dict(item.split("=", 1) for line in re.findall(r"(?m)^Environment=(.*)$", unit)
               for item in shlex.split(line))
    for line in open(unit_setting(unit, "EnvironmentFile")).read().splitlines():
        if line and not line.startswith("#"):
            key, value = line.split("=", 1)
            env[key] = value
    log = folder / "heal.log"
    with log.open("w") as out:
        proc = subprocess.Popen(shlex.split(unit_setting(unit, "ExecStart")),
                                cwd=unit_setting(unit, "WorkingDirectory"), env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    running = Loop(proc, log)

    def answers() -> bool:
        try:
            urllib.request.urlopen(urllib.request.Request(WEBHOOK, data=b"{}", method="POST"), timeout=2)
        except urllib.error.HTTPError as e:
            return e.code == 401  # up, and wants the token
        except OSError:
            return False
        return False

    try:
        wait_for(answers, 90, "the healing loop's webhook (401 without the token)")
        yield running
    finally:
        running.stop()


@pytest.fixture
def loop(tmp_path_factory):
    with healing_loop(tmp_path_factory.mktemp("heal")) as running:
        yield running


def heal_reports(after: float) -> list[dict]:
    """The loop's restart reports (reports/heal/, one a run) written since ``after`` (epoch seconds)."""
    return [json.loads(f.read_text()) for f in sorted((REPO / "reports" / "heal").glob("*.json"))
            if f.stat().st_mtime > after]


def alert_driven_restarts(after: datetime) -> list[dict]:
    """The ledger's settled (or failed) restarts the loop made since ``after``, latest line each."""
    latest = {e["at"]: e for e in ledger() if e["kind"] == "restart" and e["trigger"] == "alert"
              and datetime.fromisoformat(e["at"]) > after}
    return [e for e in latest.values() if e["outcome"] != "pending"]


def loop_restart_settled(loop: Loop, after: datetime, timeout: float = 600) -> tuple[list[dict], list[dict]]:
    """Wait until a restart of engine_lab the loop began after ``after`` is settled in the ledger and
    its step wrote the restart's report (the step ends with it); return both."""
    deadline = time.monotonic() + timeout
    while True:
        done = alert_driven_restarts(after)
        restarted = [r for r in heal_reports(after.timestamp()) if r["restarted"] == ["engine_lab"]]
        if done and restarted:
            return done, restarted
        assert time.monotonic() < deadline, \
            f"no alert-driven restart settled in {timeout:.0f} s:\n{loop.text()[-4000:]}"
        time.sleep(2)


def ledger() -> list[dict]:
    return [json.loads(line) for line in on_host("lab1", f"cat {LEDGER}").splitlines() if line.strip()]


def firing(alertname: str) -> bool:
    q = urllib.parse.urlencode({"query": f'ALERTS{{alertname="{alertname}",alertstate="firing"}}'})
    with urllib.request.urlopen(f"{PROMETHEUS}/query?{q}", timeout=10) as r:
        return bool(json.load(r)["data"]["result"])


class FaultBack:
    """The slow-prefill knob (both hosts, ``quota`` % of a CPU) on every engine process, and again,
    once a second, on every new one as soon as the engine answers /health: a fault that comes
    back after every restart. ``stop_following`` leaves it on the processes it holds; ``off``
    takes it off them too."""

    def __init__(self, quota: str):
        self.quota, self.rounds, self._stop = quota, 0, threading.Event()
        self._thread = threading.Thread(target=self._follow, daemon=True)

    def _apply(self) -> None:
        for host in ENGINE_HOSTS:
            lab_sh("fault", "slow-prefill", host, self.quota, check=False)

    def _follow(self) -> None:
        while not self._stop.wait(1.0):
            if engine_answers():
                self._apply()
                self.rounds += 1

    def start(self) -> FaultBack:
        self._apply()
        self._thread.start()
        return self

    def stop_following(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def off(self) -> None:
        self.stop_following()
        for host in ENGINE_HOSTS:
            lab_sh("fault", "slow-prefill-off", host, check=False)


def engine_answers() -> bool:
    try:
        with urllib.request.urlopen(HEALTH, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def client_ts(at: str) -> str:
    """A ledger time as the session client's records write theirs (UTC, milliseconds)."""
    return datetime.fromisoformat(at).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]


def evidence_members(entry: dict) -> dict:
    """The restart's evidence folder on the controller: each host's tar and its member names."""
    folder = Path(entry["evidence"])
    folder = folder if folder.is_absolute() else REPO / folder
    assert oct(folder.stat().st_mode & 0o777) == "0o700", folder
    out = {}
    for tar_path in sorted(folder.glob("*.tar.gz")):
        with tarfile.open(tar_path) as tar:
            out[tar_path.name] = [m.name.split("/", 1)[1] for m in tar.getmembers()]
    return out


def test_a_slow_prefill_back_after_every_restart_spends_the_budget_and_after_the_reset_the_loop_cures_it(
        client, play, loop, tmp_path):  # noqa: F811
    # The operator's reset starts the budget clean; without a reason it is refused.
    refused = play("playbooks/watch-reset.yml", extravars={"reset_engine": "engine_lab"})
    assert refused.rc != 0 and said(refused, "Nothing was changed: name the engine and what you fixed")
    assert play("playbooks/watch-reset.yml",
                extravars={"reset_engine": "engine_lab", "reason": "the heal test starts clean"}).rc == 0
    assert ledger()[-1]["kind"] == "reset"

    # The knob's alert is measured from quiet: no earlier slow-down's window still holds it.
    wait_for(lambda: not firing("VllmPrefillDegraded"), 240, "VllmPrefillDegraded quiet before the knob")
    since, knob, knob_at, knob_epoch = now_ts(), time.monotonic(), datetime.now(UTC), time.time()
    # As test_restart.py's when-degraded runs did: both hosts at 15 % of a CPU, so that the
    # restart's own passive diagnosis (5 s windows under the client's load) agrees.
    fault = FaultBack("15").start()
    try:
        # Proof 3: the fault back after every restart. The budget's restarts, then held.
        alerted, held = None, []
        deadline = time.monotonic() + 1500
        while not held:
            if alerted is None and firing("VllmPrefillDegraded"):
                alerted = time.monotonic() - knob
                print(f"proof 1: VllmPrefillDegraded fired {alerted:.0f} s after the knob")
            held = [r for r in heal_reports(knob_epoch) if r["held"] == ["engine_lab"]]
            assert time.monotonic() < deadline, f"nothing held back in 1500 s:\n{loop.text()[-4000:]}"
            time.sleep(2)
        print(f"proof 3: held {time.monotonic() - knob:.0f} s after the knob ({fault.rounds} knob rounds)")
        assert alerted is not None, "the restart came before the alert was seen firing"
        spent = sorted(alert_driven_restarts(knob_at), key=lambda e: e["at"])
        for entry in spent:
            print(f"proof 3: {entry['at']} {entry['outcome']}: {entry.get('why')}")
        assert len(spent) == BUDGET, spent
        for entry in spent:
            assert entry["outcome"] == "not-cured", entry
            assert entry["before"]["verdict"] == "prefill-degraded" and entry["policy"] == "when-degraded", entry
            bundles = evidence_members(entry)
            assert len(bundles) == len(ENGINE_HOSTS), bundles
            for name, members in bundles.items():
                assert any(m.startswith("stacks-") for m in members), (name, members)
                assert {"journal.txt", "processes.txt", "meminfo.txt", "pressure.txt"} <= set(members), members
        (row,) = held[0]["engines"]
        assert held[0]["restarted"] == [] and row["outcome"] == "held", held[0]
        assert "not cured by restart" in row["reason"] and "playbooks/watch-reset.yml" in row["reason"], row
        wait_for(lambda: firing("VllmNotCuredByRestart"), 180, "VllmNotCuredByRestart")
        # A restart's lines (pending, then its outcome) share its "at".
        begun = {e["at"] for e in ledger() if e["kind"] == "restart" and datetime.fromisoformat(e["at"]) > knob_at}
        assert len(begun) == BUDGET, "a restart after the hold"

        # The operator finds the cause and resets. The fault stays on the running processes, and
        # stops coming back: the alert still fires, Alertmanager asks again, and the loop's restart
        # cures it (proof 1).
        fault.stop_following()
        reset_at, reset = datetime.now(UTC), time.monotonic()
        assert play("playbooks/watch-reset.yml",
                    extravars={"reset_engine": "engine_lab", "reason": "proof 3: the fault is found"}).rc == 0
        done, restarted = loop_restart_settled(loop, reset_at)
    finally:
        fault.off()
    healed = time.monotonic() - reset
    # Its work is done. (The alert's 2-minute window still holds the slow minutes and Alertmanager
    # would ask again; the loop's diagnosis would skip the healthy engine, and overwrite the report.)
    loop.stop()
    (entry,) = done
    print(f"proof 1: the reset to the ledger's outcome {healed:.0f} s: {entry['outcome']}, {entry['why']}")
    assert entry["outcome"] == "cured", entry
    assert entry["before"]["verdict"] == "prefill-degraded" and entry["policy"] == "when-degraded", entry
    assert entry["after"]["verdict"] == "healthy", entry
    text = loop.text()
    assert "playbooks/rolling-restart.yml" in text or "Run the rolling restart for the engine" in text, text[-4000:]
    (report,) = restarted
    (row,) = report["engines"]
    assert report["outcome"] == "succeeded" and row["outcome"] == "restarted", report
    assert row["verdict"] == "prefill-degraded" and row["drain"] == "fallback" and row["cure"]["outcome"] == "cured"

    # The consumers: what timed out on the slowed engine fell back by itself (the field's symptom),
    # never an error; from the curing restart's move on, nothing failed and the fallback served
    # while it restarted.
    records = client_records(since)
    symptoms = [rec for rec in records if rec["outcome"] != "ok"]
    print(f"proof 1: {len(records)} requests; {len(symptoms)} timed out on the slowed engine and fell back")
    for rec in symptoms:
        assert rec["outcome"] == "fallback" and rec["base_url"] == ENGINE_URL, rec
        assert rec["error"].startswith("timeout after"), rec
    cure_began = client_ts(entry["at"])
    moved = min((rec["ts"] for rec in records if rec["base_url"] == FALLBACK_URL and rec["ts"] >= cure_began),
                default=None)
    assert moved, f"no request went to {FALLBACK_URL} during the curing restart"
    back_on_the_engine_with_nothing_lost(moved, via=FALLBACK_URL, what="answers from the restarted engine")
    wait_for(lambda: not firing("VllmNotCuredByRestart"), 120, "VllmNotCuredByRestart quiet after the reset")

    # The probe sees the cure: a quiet engine reads healthy, is skipped, and nothing changes.
    on_host("lab3", f"systemctl stop {CLIENT}")
    try:
        again, report = restart(play, tmp_path)
    finally:
        on_host("lab3", f"systemctl start {CLIENT}")
    assert again.rc == 0
    assert report["engines"][0]["outcome"] == "skipped" and report["engines"][0]["verdict"] == "healthy", report
    assert said(again, "skip engine_lab: healthy: nothing to cure")
    assert again.changed() == {}, "a run with nothing to restart changed something"
    assert os.path.exists(HEAL_DIR / "heal.env") and oct((HEAL_DIR / "heal.env").stat().st_mode & 0o777) == "0o600"


def test_prometheus_killed_serving_goes_on_and_the_dead_mans_switch_fires(client, loop):  # noqa: F811
    """Proof 5: Prometheus on lab3 killed; the consumers' requests still succeed, and the loop, which
    gets Alertmanager's heartbeat every HEARTBEAT_S, says DEAD-MAN once none came for DEADMAN_S."""
    # The loop got a POST from Alertmanager first (the heartbeat comes every HEARTBEAT_S; -v logs each).
    wait_for(lambda: re.search(r'"POST /alerts HTTP/1.1" 200', loop.text()), HEARTBEAT_S + 30,
             "Alertmanager's first POST")
    # While the watchers live the heartbeat comes every HEARTBEAT_S, inside the timeout: no DEAD-MAN.
    assert "DEAD-MAN" not in loop.text(), loop.text()[-4000:]
    since, killed = now_ts(), time.monotonic()
    on_host("lab3", "systemctl kill -s KILL prometheus.service; systemctl stop prometheus.service")
    try:
        # The last heartbeat comes at the latest when Prometheus's last send expires; the timeout runs
        # from it.
        bound = LAST_SEND_VALID_S + DEADMAN_S + 30
        wait_for(lambda: "DEAD-MAN" in loop.text(), bound, "the dead-man's alert in the loop's journal")
        print(f"proof 5: DEAD-MAN {time.monotonic() - killed:.0f} s after the kill (bound {bound} s)")
        s = summary(since)
        assert s["outcomes"].get("ok", 0) > 0 and s["outcomes"].get("error", 0) == 0, s
        assert s["outcomes"].get("fallback", 0) == 0, s
    finally:
        on_host("lab3", "systemctl start prometheus.service")
