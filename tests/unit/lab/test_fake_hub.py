"""Tests for lab/hub/fake_hub.py, driven by the REAL client: `hf download` of
huggingface_hub 2.4.0 (the engine hosts' pin, in the test venv), with the
environment vllm_install sets, against the fake on an ephemeral 127.0.0.1 port.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

HUB = Path(__file__).resolve().parents[3] / "lab" / "hub"
if str(HUB) not in sys.path:
    sys.path.insert(0, str(HUB))

import fake_hub  # noqa: E402
from ansible.module_utils.fleet import hub_model  # noqa: E402

HF = Path(sys.executable).parent / "hf"
REV = "0123456789abcdef0123456789abcdef01234567"
REV2 = "89abcdef0123456789abcdef0123456789abcdef"
TOKEN = "hf_fake-lab-token-0123"
# hf reads a body in 10 MiB chunks (constants.DOWNLOAD_CHUNK_SIZE) and resumes
# after the last whole chunk: the largest file is past two, cut after one.
BIG = 16 * 1024 * 1024
CUT = 12 * 1024 * 1024



def test_the_real_client_is_in_the_test_venv():
    """requirements.txt pins huggingface_hub as the wheelhouse does: these tests drive its hf."""
    assert HF.exists(), "hf is missing: make venv installs huggingface_hub from requirements.txt"


def test_the_token_can_come_from_a_file(tmp_path, model):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    args = fake_hub.parse_args(["--repo", "org/tiny", "--revision", f"{REV}={model}", "--token-file", str(token_file)])
    assert args.token == TOKEN
    token_file.write_text("")
    with pytest.raises(SystemExit):
        fake_hub.parse_args(["--repo", "org/tiny", "--revision", f"{REV}={model}", "--token-file", str(token_file)])
    with pytest.raises(SystemExit):
        fake_hub.parse_args(["--repo", "org/tiny", "--revision", f"{REV}={model}", "--token", "x",
                             "--token-file", str(token_file)])


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("model")
    (folder / "config.json").write_text('{"model_type": "llama"}\n')
    (folder / "tokenizer.json").write_text('{"version": "1.0"}\n')
    (folder / "sub").mkdir()
    (folder / "sub" / "notes.txt").write_text("nested\n")
    (folder / "model.safetensors").write_bytes(os.urandom(BIG))
    return folder


@pytest.fixture
def hub(model, tmp_path):
    servers = []

    def start(**kwargs):
        snapshots = kwargs.pop("snapshots", None) or [fake_hub.Snapshot(REV, model)]
        server = fake_hub.FakeHub(("127.0.0.1", 0), repo="org/tiny", snapshots=snapshots,
                                  log=str(tmp_path / "hub.jsonl"), **kwargs)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def download(server, tmp_path, revision=REV, token=TOKEN, repo="org/tiny", dest="out"):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update({"HF_ENDPOINT": server.url, "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_DISABLE_XET": "1",
                "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_UPDATE_CHECK": "1",
                "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_HUB_ENABLE_HF_TRANSFER": "0"})
    if token:
        # As vllm_install hands it over: a file that HF_TOKEN_PATH names.
        (tmp_path / "hf-token").write_text(token)
        env["HF_TOKEN_PATH"] = str(tmp_path / "hf-token")
    return subprocess.run([str(HF), "download", repo, "--revision", revision, "--local-dir", str(tmp_path / dest)],
                          env=env, capture_output=True, text=True, timeout=60)


def log(tmp_path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "hub.jsonl").read_text().splitlines()]


def same_files(a: Path, b: Path) -> bool:
    def files(root):
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*")
                if p.is_file() and ".cache" not in p.relative_to(root).parts}
    return files(a) == files(b)


def test_a_pinned_revision_downloads_identical_files(hub, model, tmp_path):
    server = hub(token=TOKEN)
    out = download(server, tmp_path)
    assert out.returncode == 0, out.stderr
    assert same_files(model, tmp_path / "out")
    # hf's own record of the commit, which the role copies into its marker.
    metadata = (tmp_path / "out" / ".cache" / "huggingface" / "download" / "config.json.metadata").read_text()
    assert hub_model.marker("org/tiny", REV, server.url, metadata)["commit"] == REV
    records = log(tmp_path)
    assert {(r["method"], r["path"].split("?")[0]) for r in records} >= {
        ("GET", f"/api/models/org/tiny/tree/{REV}"), ("HEAD", f"/org/tiny/resolve/{REV}/config.json"),
        ("GET", f"/org/tiny/resolve/{REV}/model.safetensors"), ("GET", f"/org/tiny/resolve/{REV}/sub/notes.txt")}
    assert all(r["authorization"] for r in records if r["path"] != "/api/agent-harnesses")
    assert TOKEN not in (tmp_path / "hub.jsonl").read_text()


def test_a_branch_resolves_to_its_commit(hub, model, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text('{"model_type": "other"}\n')
    server = hub(snapshots=[fake_hub.Snapshot(REV, model), fake_hub.Snapshot(REV2, other)], branches={"main": REV2})
    out = download(server, tmp_path, revision="main", token="")
    assert out.returncode == 0, out.stderr
    assert same_files(other, tmp_path / "out")
    assert ("GET", "/api/models/org/tiny/revision/main", 200) in {(r["method"], r["path"], r["status"])
                                                                 for r in log(tmp_path)}


def test_a_cut_download_resumes_with_a_range_request(hub, model, tmp_path):
    server = hub(token=TOKEN, cut_after=CUT)
    out = download(server, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "Trying to resume download" in out.stderr
    assert same_files(model, tmp_path / "out")
    gets = [r for r in log(tmp_path) if r["method"] == "GET" and r["path"].endswith("/model.safetensors")]
    assert [(g["status"], g["bytes"]) for g in gets][0] == (200, CUT)
    # Resumed after the last whole 10 MiB chunk hf had written.
    assert (gets[1]["status"], gets[1]["range"], gets[1]["bytes"]) == (206, "bytes=10485760-", BIG - 10485760)


def test_a_wrong_token_fails_and_the_message_names_what_to_set_without_it(hub, tmp_path):
    server = hub(token=TOKEN)
    wrong = "hf_wrong-token-4567"
    out = download(server, tmp_path, token=wrong)
    assert out.returncode == 1
    assert [r["status"] for r in log(tmp_path) if r["path"].startswith("/api/models/")] == [401]
    kind = hub_model.classify(out.returncode, out.stderr)
    assert kind == hub_model.AUTH
    message = hub_model.failure_message(kind, repo_id="org/tiny", revision=REV, endpoint=server.url,
                                        folder=str(tmp_path / "out"),
                                        rerun="ansible-playbook -i inventory/lab site.yml",
                                        hf_error=hub_model.last_error(out.stderr), secrets=[wrong])
    assert "vllm_install_hf_token" in message and server.url in message and REV in message
    assert wrong not in message and TOKEN not in message


def test_no_token_gets_the_gated_repo_answer(hub, tmp_path):
    out = download(hub(token=TOKEN), tmp_path, token="")
    assert out.returncode == 1 and "requires approval" in out.stderr
    assert hub_model.classify(out.returncode, out.stderr) == hub_model.AUTH


@pytest.mark.parametrize("revision", ["1" * 40, "nobranch"])
def test_an_unknown_revision_fails_as_404(hub, tmp_path, revision):
    out = download(hub(), tmp_path, revision=revision)
    assert out.returncode == 1
    assert [r["status"] for r in log(tmp_path) if r["path"].startswith("/api/models/")] == [404]
    assert hub_model.classify(out.returncode, out.stderr) == hub_model.REVISION_NOT_FOUND
    assert not (tmp_path / "out" / "config.json").exists()


def test_an_unknown_repo_fails_as_404(hub, tmp_path):
    out = download(hub(), tmp_path, repo="org/other")
    assert hub_model.classify(out.returncode, out.stderr) == hub_model.REPO_NOT_FOUND


def test_range_requests_and_the_command_line(model, tmp_path):
    proc = subprocess.Popen([sys.executable, str(HUB / "fake_hub.py"), "--model-dir", str(model), "--repo", "org/tiny",
                             "--revision", REV, "--port", "0", "--log", str(tmp_path / "hub.jsonl")],
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        assert line.startswith("fake_hub: serving org/tiny at http://127.0.0.1:"), line
        url = line.split(" at ")[1].split(" ")[0]
        import urllib.request
        request = urllib.request.Request(f"{url}/org/tiny/resolve/{REV}/config.json", headers={"Range": "bytes=2-5"})
        with urllib.request.urlopen(request) as resp:
            assert (resp.status, resp.read(), resp.headers["Content-Range"], resp.headers["X-Repo-Commit"]) == (
                206, b"mode", f"bytes 2-5/{(model / 'config.json').stat().st_size}", REV)
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0


@pytest.mark.parametrize("argv, error", [
    (["--repo", "org/tiny", "--revision", "main"], "a revision is a 40-hex commit hash"),
    (["--repo", "../x", "--revision", REV, "--model-dir", "m"], "is no repo id"),
    (["--repo", "org/tiny", "--revision", REV, "--model-dir", "m", "--branch", "dev=" + "2" * 40],
     "NAME=COMMIT, with one of the --revision commits"),
])
def test_bad_options_are_refused(argv, error, capsys):
    with pytest.raises(SystemExit) as exc:
        fake_hub.parse_args(argv)
    assert exc.value.code == 2 and error in capsys.readouterr().err
