"""Tests for plugins/module_utils/fleet/hub_model.py: a hub model's folder, and
hf download's failures (huggingface_hub 2.4.0), table-driven over the real
client's captured output (tests/fixtures/hf-2.4.0, README.md there)."""
from __future__ import annotations

import pytest
from ansible.module_utils.fleet import hub_model as hm

FIXTURES = __import__("pathlib").Path(__file__).resolve().parents[3] / "fixtures" / "hf-2.4.0"
REV = "0123456789abcdef0123456789abcdef01234567"
TOKEN = "s3cret-token-value"


def capture(name: str) -> tuple[int, str]:
    return int((FIXTURES / f"{name}.rc").read_text()), (FIXTURES / f"{name}.stderr").read_text()


@pytest.mark.parametrize("name, kind", [
    ("ok", hm.OK),
    ("wrong-token", hm.AUTH),
    ("no-token", hm.AUTH),
    ("unknown-commit", hm.REVISION_NOT_FOUND),
    ("unknown-branch", hm.REVISION_NOT_FOUND),
    ("unknown-repo", hm.REPO_NOT_FOUND),
    ("connection-refused", hm.CONNECTION),
    ("name-not-resolved", hm.CONNECTION),
])
def test_classify_the_captures(name, kind):
    rc, stderr = capture(name)
    assert hm.classify(rc, stderr) == kind


@pytest.mark.parametrize("rc, stderr, msg, kind", [
    # The command module's own failure when the venv has no hf.
    (2, "", "[Errno 2] No such file or directory: b'/opt/vllm/bin/hf'", hm.NO_CLI),
    # HfHubHTTPError's 403, as utils/_http.py words it (no capture: the fake answers 401).
    (1, "Error: \n\n403 Forbidden: Please enable access.\nCannot access content at: http://h/x.\n", "", hm.AUTH),
    (1, "Error: Server error '503 Service Unavailable' for url 'http://h/api/models/o/n/tree/x'", "", hm.CONNECTION),
    (1, "Error: Local entry not found. The cached snapshot for 'o/n' is incomplete", "", hm.CONNECTION),
    (1, "Traceback (most recent call last):\nKeyError: 'x'", "", hm.FAILED),
    # A look-alike in a retry warning (a file called "Revision not found in"), not hf's Error: line.
    (1, "'Revision not found in x' thrown while requesting GET http://h\nError: Client error '401 Unauthorized'",
     "", hm.AUTH),
    (None, "", "", hm.FAILED),
    ("1", "Error: Revision not found in model 'o/n'.", "", hm.REVISION_NOT_FOUND),
])
def test_classify_table(rc, stderr, msg, kind):
    assert hm.classify(rc, stderr, msg) == kind


@pytest.mark.parametrize("rc", [True, "one", 1.5, [1]])
def test_classify_refuses_an_rc_that_is_no_integer(rc):
    with pytest.raises(hm.HubModelError, match="an exit status is an integer"):
        hm.classify(rc, "")


def test_last_error_joins_hfs_error_block_without_ansi_or_hint():
    _, stderr = capture("unknown-repo")
    assert hm.last_error(stderr) == (
        "Model 'org/other' not found. If the repo is private, make sure you are authenticated and your token has"
        " the required permissions. If the repo does not exist, create it with: hf repos create org/other")


@pytest.mark.parametrize("name, kind, says", [
    ("wrong-token", hm.AUTH, "Put a token that can read it in the vault (vllm_install_hf_token"),
    ("unknown-commit", hm.REVISION_NOT_FOUND, "Set vllm_install_model_revision to a commit hash"),
    ("unknown-repo", hm.REPO_NOT_FOUND, "Check vllm_install_model_source (hub:<org>/<name>)"),
    ("connection-refused", hm.CONNECTION, "set vllm_install_hf_endpoint to a reachable hub mirror"),
])
def test_failure_message_names_repo_revision_endpoint_what_to_set_and_the_rerun(name, kind, says):
    rc, stderr = capture(name)
    message = hm.failure_message(hm.classify(rc, stderr), repo_id="org/tiny", revision=REV,
                                 endpoint="http://user:pw@mirror.example:8090", folder=f"/srv/models/org--tiny/{REV}",
                                 host="spark1", rerun="ansible-playbook -i inventory/site site.yml",
                                 hf_error=hm.last_error(stderr), secrets=[TOKEN, "wrong-token-value"])
    assert message.startswith(f"Downloading hub:org/tiny at revision {REV} from http://mirror.example:8090 into"
                              f" /srv/models/org--tiny/{REV} on spark1 failed: ")
    assert says in message
    assert "The engine was not changed. Then rerun: ansible-playbook -i inventory/site site.yml" in message
    assert "pw" not in message and TOKEN not in message


def test_failure_message_never_quotes_the_token_that_hf_printed():
    stderr = f"Error: Client error '401 Unauthorized' for url 'http://h/x?token={TOKEN}'\nHint: x"
    message = hm.failure_message(hm.classify(1, stderr), repo_id="o/n", revision=REV, endpoint="", folder="/m",
                                 hf_error=hm.last_error(stderr), secrets=[TOKEN])
    assert TOKEN not in message and "hf said: Client error '401 Unauthorized'" in message
    assert "from https://huggingface.co into /m failed" in message


@pytest.mark.parametrize("kind", [hm.OK, "other", None])
def test_failure_message_refuses_no_failure(kind):
    with pytest.raises(hm.HubModelError):
        hm.failure_message(kind, repo_id="o/n", revision=REV, endpoint="", folder="/m")


@pytest.mark.parametrize("repo, revision, problems", [
    ("org/name", REV, 0),
    ("org/name", "main", 0),
    ("gpt2", "v1.0", 0),
    ("org/name", "", 1),
    ("org/name", None, 1),
    ("../name", REV, 1),
    ("org/..", REV, 1),
    ("/org/name", REV, 1),
    ("org/name/extra", REV, 1),
    ("org--x/name", REV, 1),
    ("org/name", "refs/pr/1", 1),
    ("org/name", "..", 1),
    ("org/name", "/abs", 1),
    ("org/name", "a..b", 1),
    ("", "", 2),
])
def test_source_problems(repo, revision, problems):
    assert len(hm.source_problems(repo, revision)) == problems


def test_the_missing_revision_says_to_pin_a_commit_hash():
    (problem,) = hm.source_problems("org/name", "")
    assert "needs vllm_install_model_revision: pin the commit hash" in problem


def test_marker_takes_the_commit_from_hfs_metadata():
    metadata = f"{REV}\n\"etag\"\n1796430513.6\n"
    assert hm.marker("org/tiny", "main", "", metadata) == {
        "repo": "org/tiny", "revision": "main", "endpoint": "https://huggingface.co", "commit": REV}
    assert hm.marker("org/tiny", REV, "http://m:1", "")["commit"] is None
