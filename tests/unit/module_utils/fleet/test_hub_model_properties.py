"""Property tests for plugins/module_utils/fleet/hub_model.py over hostile input
(tests/hostile.py) and the real client's captures (tests/fixtures/hf-2.4.0).

What they promise: hf's stderr, whatever it holds, is classified into one of
the documented kinds and never raises; a failure's message never holds the
token, even when the stderr quotes it; a folder never leaves the model dir.
"""
from __future__ import annotations

from pathlib import Path

from ansible.module_utils.fleet import hub_model as hm
from hostile import any_text, documents, mutated, raises_only
from hypothesis import given
from hypothesis import strategies as st

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "hf-2.4.0"
LINES = [line for p in sorted(FIXTURES.glob("*.stderr")) for line in p.read_text().splitlines()]
STDERR = st.one_of(any_text(), documents(LINES), mutated(LINES))
TOKENS = st.text(min_size=1, max_size=40)
RCS = st.one_of(st.integers(), st.none(), st.text(max_size=8), st.booleans(), st.floats())


def test_the_lines_are_the_captures():
    assert len(LINES) >= 20 and any(line.startswith("\x1b[1m\x1b[31mError: ") for line in LINES)


@given(RCS, STDERR, st.text(max_size=200))
def test_classify_raises_only_the_documented_error(rc, stderr, msg):
    kind = raises_only(hm.HubModelError, hm.classify, rc, stderr, msg)
    assert kind is None or kind in hm.KINDS


@given(STDERR, TOKENS, st.sampled_from(hm.KINDS[1:]))
def test_no_token_in_a_failure_message(stderr, token, kind):
    # The token planted in hf's stderr, in the repo id and endpoint too, as a hostile case would.
    planted = f"{stderr}\nError: Client error '401 Unauthorized' {token} {stderr[:50]}"
    message = hm.failure_message(kind, repo_id=f"o/{token}", revision=token, endpoint=f"http://{token}@h/{token}",
                                 folder=f"/m/{token}", host=token, rerun=f"ansible-playbook -i {token} site.yml",
                                 hf_error=hm.last_error(planted), secrets=[token])
    assert token not in message


@given(STDERR, TOKENS)
def test_filter_path_never_leaks(stderr, token):
    planted = stderr.replace("x", token) + f"\nError: {token}"
    kind = hm.classify(1, planted)
    if kind != hm.OK:
        message = hm.failure_message(kind, repo_id="o/n", revision="r", endpoint="", folder="/m",
                                     hf_error=hm.last_error(planted), secrets=[token])
        assert token not in message


@given(st.text(max_size=120), st.text(max_size=160))
def test_a_folder_stays_inside_the_model_dir(repo, revision):
    folder = hm.model_folder("/srv/models", repo, revision)
    assert folder == "/srv/models" or (folder.startswith("/srv/models/") and ".." not in folder
                                       and folder.count("/") == 4)
