"""Tests for playbooks/awx-restart.yml (roles/awx_restart): the real playbook,
run by the venv's ansible-playbook and awx.awx 24.6.1 against a fake AWX
(tests/awx_fake.py), which records every request it gets."""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from awx_fake import FakeAWX

REPO = Path(__file__).resolve().parents[2]
TOKEN = "t0ken-for-the-fake"
# Shaped like a real key, so that a leak of any one line of it shows.
KEY_BODY = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQfakefakefake"
KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\n%s\n-----END OPENSSH PRIVATE KEY-----\n" % KEY_BODY
RRULE = "DTSTART;TZID=Europe/Berlin:20261201T033000 RRULE:FREQ=DAILY;INTERVAL=1"
JOB_TEMPLATE = "vllm-fleet rolling restart"


def play(awx: FakeAWX, *extra: str) -> subprocess.CompletedProcess:
    """One run of the playbook against ``awx``, as an operator runs it, plus ``extra`` arguments."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), CONTROLLER_HOST=awx.url,
               CONTROLLER_OAUTH_TOKEN=TOKEN, ANSIBLE_FORCE_COLOR="0",
               PATH="%s:%s" % (REPO / ".venv" / "bin", os.environ.get("PATH", "")))
    # -i "localhost," leaves interpreter discovery free to pick a broken shim; the
    # modules run on the controller, so they get the venv's python.
    return subprocess.run(
        [str(REPO / ".venv" / "bin" / "ansible-playbook"), "playbooks/awx-restart.yml",
         "-i", "localhost,", "-c", "local",
         "-e", "ansible_python_interpreter=%s" % (REPO / ".venv" / "bin" / "python"),
         "-e", "awx_restart_scm_url=https://git.example/vllm-fleet.git",
         "-e", json.dumps({"awx_restart_ssh_key": KEY}), *extra],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def recap(result: subprocess.CompletedProcess) -> dict:
    """localhost's PLAY RECAP counts: {'ok': 9, 'changed': 6, ...}."""
    line = re.search(r"^localhost\s+:\s+(.*)$", result.stdout, re.M)
    assert line, result.stdout[-3000:] + result.stderr[-2000:]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line.group(1))}


def ran(result: subprocess.CompletedProcess) -> str:
    return "rc %d\n%s\n%s" % (result.returncode, result.stdout[-4000:], result.stderr[-2000:])


def refusal(result: subprocess.CompletedProcess) -> str:
    """The preflight's "Nothing was changed: ..." message of a failed run."""
    assert result.returncode != 0, ran(result)
    message = re.search(r"msg: '?(Nothing was changed: .*?)'? PLAY RECAP", " ".join(result.stdout.split()))
    assert message, ran(result)
    # The YAML callback quotes the message in single quotes, doubling the apostrophes.
    return message.group(1).replace("''", "'")


@pytest.fixture(scope="module")
def configured():
    """A fake AWX that the playbook configured, then a second run with the same input."""
    with FakeAWX(TOKEN) as awx:
        first = play(awx)
        mark = len(awx.requests)
        second = play(awx)
        yield SimpleNamespace(awx=awx, first=first, second=second, mark=mark)


@pytest.fixture(scope="module")
def removed():
    """A fake AWX that the playbook configured and then took the restart away from (state absent)."""
    with FakeAWX(TOKEN) as awx:
        first = play(awx)
        assert first.returncode == 0, ran(first)
        mark = len(awx.requests)
        absent = play(awx, "-e", "awx_restart_state=absent")
        yield SimpleNamespace(awx=awx, absent=absent, mark=mark)


def test_a_first_run_creates_everything_the_restart_needs(configured):
    """The whole chain AWX needs to run the restart on its own: project, inventory
    sourced from it, credential, job template with its survey, schedule, wired by id."""
    awx, result = configured.awx, configured.first
    assert result.returncode == 0, ran(result)
    assert recap(result)["changed"] == 6, ran(result)
    org = awx.one("organizations", name="Default")["id"]

    project = awx.one("projects", name="vllm-fleet")
    assert (project["scm_type"], project["scm_url"], project["scm_branch"]) == \
        ("git", "https://git.example/vllm-fleet.git", "main")
    assert project["organization"] == org
    inventory = awx.one("inventories", name="vllm-fleet")
    assert inventory["organization"] == org
    source = awx.one("inventory_sources", inventory=inventory["id"])
    assert (source["source"], source["source_project"], source["source_path"]) == \
        ("scm", project["id"], "inventory/site/hosts.yml")

    credential = awx.one("credentials", name="vllm-fleet hosts")
    assert credential["credential_type"] == awx.one("credential_types", name="Machine")["id"]
    assert credential["inputs"]["username"] == "root"
    assert credential["inputs"]["ssh_key_data"] == KEY

    template = awx.one("job_templates", name=JOB_TEMPLATE)
    assert template["playbook"] == "playbooks/rolling-restart.yml"
    assert (template["project"], template["inventory"]) == (project["id"], inventory["id"])
    assert template["allow_simultaneous"] is False
    assert template["survey_enabled"] is True
    assert awx.related[("job_templates", template["id"], "credentials")] == [credential["id"]]
    survey = awx.related[("job_templates", template["id"], "survey_spec")]
    policy = next(q for q in survey["spec"] if q["variable"] == "restart_policy")
    assert policy["type"] == "multiplechoice"
    assert policy["choices"] == ["when-degraded", "always"]
    assert policy["default"] == "when-degraded"
    assert policy["required"] is True

    schedule = awx.one("schedules", name="vllm-fleet nightly restart")
    assert schedule["rrule"] == RRULE
    assert schedule["extra_data"] == {"restart_policy": "when-degraded", "restart_trigger": "schedule"}
    trigger = next(q for q in survey["spec"] if q["variable"] == "restart_trigger")
    assert (trigger["choices"], trigger["default"]) == (["operator", "schedule", "alert"], "operator")
    assert schedule["enabled"] is True
    assert schedule["unified_job_template"] == template["id"]


def test_a_second_run_with_the_same_input_changes_nothing(configured):
    """Idempotence, seen from both sides: ansible reports no change, and AWX got no
    write at all (a module that PATCHes the same values back would show here)."""
    result = configured.second
    assert result.returncode == 0, ran(result)
    assert recap(result)["changed"] == 0, ran(result)
    assert configured.awx.writes(since=configured.mark) == []
    assert len(configured.awx.requests) > configured.mark


def test_secrets_are_never_shown(configured):
    """The ssh key and the controller token reach AWX but never the run's output,
    on the run that creates the credential nor on the one that finds it."""
    assert configured.awx.one("credentials")["inputs"]["ssh_key_data"] == KEY
    for result in (configured.first, configured.second):
        out = result.stdout + result.stderr
        for secret in (KEY_BODY, TOKEN):
            assert secret not in out


@pytest.mark.parametrize("rrule,problem", [
    ("DTSTART;TZID=Europe/Berlin:20261201T033000 RRULE:FREQ=DAILY", "needs INTERVAL"),
    ("DTSTART;TZID=Europe/Berlin:20261201T033000 RRULE:FREQ=DAILY;INTERVAL=1;COUNT=3;UNTIL=20270101T000000Z",
     "not both"),
])
def test_a_bad_rrule_stops_before_any_call_to_awx(rrule, problem):
    """AWX refuses a bad RRULE only once the project and template exist; the
    preflight refuses it first, offline, and says nothing was changed."""
    with FakeAWX(TOKEN) as awx:
        result = play(awx, "-e", json.dumps({"awx_restart_rrule": rrule}))
    message = refusal(result)
    assert problem in message
    assert awx.requests == []


@pytest.mark.parametrize("path", ["inventory/lab/hosts.yml", "inventory/lab-two-engines/hosts.yml", "inventory/lab"])
def test_the_labs_inventory_is_refused_before_any_call_to_awx(path):
    """A schedule against the lab's inventory would restart the lab's hosts every
    night: refused offline, with the commands to run, unless asked for."""
    with FakeAWX(TOKEN) as awx:
        result = play(awx, "-e", json.dumps({"awx_restart_inventory_path": path}))
    message = refusal(result)
    assert message == (
        f'Nothing was changed: the schedule would run the rolling restart against the lab\'s inventory'
        f' (awx_restart_inventory_path "{path}"). Set it to your site\'s in inventory/<site>/group_vars/all/,'
        " then run ansible-playbook -i inventory/<site> playbooks/awx-restart.yml. To schedule against the lab"
        " on purpose: ansible-playbook -i localhost, playbooks/awx-restart.yml -e vllm_fleet_allow_lab_schedule=true")
    assert awx.requests == []


def test_the_labs_inventory_is_scheduled_when_asked():
    """-e vllm_fleet_allow_lab_schedule=true (a string from the command line) lets it through."""
    with FakeAWX(TOKEN) as awx:
        result = play(awx, "-e", json.dumps({"awx_restart_inventory_path": "inventory/lab/hosts.yml"}),
                      "-e", "vllm_fleet_allow_lab_schedule=true")
        assert result.returncode == 0, ran(result)
        source = awx.one("inventory_sources")
    assert source["source_path"] == "inventory/lab/hosts.yml"


def test_a_site_inventory_named_like_the_lab_is_not_refused():
    """Only inventory/lab and inventory/lab-*: a site whose name merely starts with lab is scheduled."""
    with FakeAWX(TOKEN) as awx:
        result = play(awx, "-e", json.dumps({"awx_restart_inventory_path": "inventory/laboratory/hosts.yml"}))
        assert result.returncode == 0, ran(result)


def test_check_mode_on_a_configured_awx_reads_but_never_writes(configured):
    """--check reports what would change (a new branch) and sends no write, but it
    still talks to AWX: every module looks its objects up with GETs."""
    awx = configured.awx
    mark = len(awx.requests)
    result = play(awx, "--check", "-e", "awx_restart_scm_branch=release")
    assert result.returncode == 0, ran(result)
    assert recap(result)["changed"] == 1, ran(result)
    assert awx.writes(since=mark) == []
    assert any(r["method"] == "GET" for r in awx.requests[mark:])
    assert awx.one("projects")["scm_branch"] == "main"


@pytest.fixture(scope="module")
def fresh_check():
    """--check against an AWX that has none of it yet."""
    with FakeAWX(TOKEN) as awx:
        yield SimpleNamespace(awx=awx, result=play(awx, "--check"))


def test_check_mode_on_a_fresh_awx_never_writes(fresh_check):
    """--check sends no POST, PATCH or DELETE; it does contact AWX (GETs), so it
    needs a reachable controller and a valid token like a real run."""
    assert fresh_check.awx.writes() == []
    assert any(r["method"] == "GET" for r in fresh_check.awx.requests)


def test_check_mode_on_a_fresh_awx_stops_at_the_first_object_it_would_create(fresh_check):
    """awx.awx looks up what earlier tasks would have created, so on an AWX where nothing
    exists yet --check stops at the inventory source (documented in docs/restart.md: run it
    for real once, then --check shows changes)."""
    result = fresh_check.result
    assert result.returncode != 0
    assert "was not found" in result.stdout + result.stderr, ran(result)


def test_absent_deletes_the_schedule_and_the_job_template_only(removed):
    """state absent takes the restart off the calendar and out of the templates (AWX
    deletes the template's schedules with it), and leaves the project, inventory and
    credential that other templates may use."""
    awx, result = removed.awx, removed.absent
    assert result.returncode == 0, ran(result)
    deletes = [r["path"] for r in awx.writes(since=removed.mark)]
    assert [r["method"] for r in awx.writes(since=removed.mark)] == ["DELETE"]
    assert deletes[0].startswith("/api/v2/job_templates/")
    assert awx.objects["schedules"] == [] and awx.objects["job_templates"] == []
    for kind in ("projects", "inventories", "inventory_sources", "credentials"):
        assert len(awx.objects[kind]) == 1, kind


def test_absent_twice_is_a_no_op(removed):
    """Taking the restart away again, when it is already gone, changes nothing and succeeds."""
    mark = len(removed.awx.requests)
    result = play(removed.awx, "-e", "awx_restart_state=absent")
    assert removed.awx.writes(since=mark) == []
    assert result.returncode == 0, ran(result)
    assert recap(result)["changed"] == 0, ran(result)


def _associated(awx: FakeAWX) -> list:
    """The names of the credentials on the job template, in AWX's order."""
    template = awx.one("job_templates", name=JOB_TEMPLATE)
    return [awx.one("credentials", id=i)["name"] for i in awx.related[("job_templates", template["id"], "credentials")]]


@pytest.fixture(scope="module")
def credentials():
    """A configured AWX; a Vault credential put on the job template by hand (as
    inventory/example/README.md once said to) and a run with the same input;
    another made in AWX and declared in the inventory
    (awx_restart_extra_credentials) and two runs with it; then one with the
    hosts' credential renamed. Each run: its result, its writes, and the names
    on the template after it."""
    declared = ["-e", json.dumps({"awx_restart_extra_credentials": ["vllm-fleet vault"]})]
    runs = {}

    def run(name, *extra):
        mark = len(awx.requests)
        result = play(awx, *extra)
        runs[name] = SimpleNamespace(result=result, writes=awx.writes(since=mark), names=_associated(awx))

    with FakeAWX(TOKEN) as awx:
        run("first")
        assert runs["first"].result.returncode == 0, ran(runs["first"].result)
        vault = awx.one("credential_types", name="Vault")["id"]
        by_hand = awx._create("credentials", {"name": "vault by hand", "credential_type": vault, "organization": 1,
                                              "inputs": {"vault_id": "lab", "vault_password": "pw-by-hand"}})
        awx._create("credentials", {"name": "vllm-fleet vault", "credential_type": vault, "organization": 1,
                                    "inputs": {"vault_id": "site", "vault_password": "pw-declared"}})
        template = awx.one("job_templates", name=JOB_TEMPLATE)
        awx.related[("job_templates", template["id"], "credentials")].append(by_hand["id"])
        run("by_hand")
        run("declaring", *declared)
        run("again", *declared)
        run("renamed", *declared, "-e", json.dumps({"awx_restart_credential": "vllm-fleet hosts 2026"}))
        yield SimpleNamespace(awx=awx, **runs)


def test_a_rerun_keeps_a_credential_added_by_hand_and_changes_nothing(credentials):
    """awx.awx.job_template makes the template's credentials exactly the list it is
    given; the role gives it the ones already there too. So the Vault credential put
    on by hand survives a rerun with the same input, which reports changed=0, writes
    nothing, and names the kept credential with what to do."""
    run = credentials.by_hand
    assert run.result.returncode == 0, ran(run.result)
    assert recap(run.result)["changed"] == 0, ran(run.result)
    assert run.writes == []
    assert run.names == ["vllm-fleet hosts", "vault by hand"]
    out = " ".join(run.result.stdout.split())
    assert 'though the inventory does not declare them: "vault by hand".' in out, ran(run.result)
    # The command to run again names this run's inventory (-i localhost, here).
    assert "then run ansible-playbook -i localhost, playbooks/awx-restart.yml." in out


def test_a_declared_credential_is_added_and_a_second_run_changes_nothing(credentials):
    """Declared in the inventory, a credential is put on the template beside the kept
    one (one association, changed=1); the same input again: changed=0, no write to
    AWX, all three still there."""
    run = credentials.declaring
    assert run.result.returncode == 0, ran(run.result)
    assert recap(run.result)["changed"] == 1, ran(run.result)
    assert [(w["method"], w["body"]) for w in run.writes] == \
        [("POST", {"id": credentials.awx.one("credentials", name="vllm-fleet vault")["id"]})]
    assert run.names == ["vllm-fleet hosts", "vault by hand", "vllm-fleet vault"]
    again = credentials.again
    assert again.result.returncode == 0, ran(again.result)
    assert recap(again.result)["changed"] == 0, ran(again.result)
    assert again.writes == []
    assert again.names == ["vllm-fleet hosts", "vault by hand", "vllm-fleet vault"]


def test_a_renamed_hosts_credential_replaces_the_machine_credential_only(credentials):
    """AWX allows one Machine credential per template (the fake refuses a second as
    AWX does), so the old hosts' credential goes; the two Vault ones stay."""
    result = credentials.renamed.result
    assert result.returncode == 0, ran(result)
    assert sorted(credentials.renamed.names) == ["vault by hand", "vllm-fleet hosts 2026", "vllm-fleet vault"]
    for secret in ("pw-by-hand", "pw-declared", KEY_BODY, TOKEN):
        assert secret not in result.stdout + result.stderr


def test_the_fake_refuses_a_second_credential_of_one_type_as_awx_does():
    """The rule the rename test relies on, seen on the fake alone."""
    with FakeAWX(TOKEN) as awx:
        machine = awx.one("credential_types", name="Machine")["id"]
        one, two = (awx._create("credentials", {"name": n, "credential_type": machine, "inputs": {}})
                    for n in ("one", "two"))
        template = awx._create("job_templates", {"name": "t"})
        status, _ = awx._route("POST", ["job_templates", str(template["id"]), "credentials"], {}, {"id": one["id"]})
        assert status == 204
        status, answer = awx._route("POST", ["job_templates", str(template["id"]), "credentials"], {},
                                    {"id": two["id"]})
        assert (status, answer) == (400, {"error": "Cannot assign multiple Machine credentials."})
