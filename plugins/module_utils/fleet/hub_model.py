"""A model from the Hugging Face Hub: its folder, and what a failed download means.

``vllm_install`` downloads a ``hub:<repo id>`` source with ``hf download
<repo id> --revision <revision> --local-dir <folder>`` (huggingface_hub
2.4.0). This module holds the pure part, for the engine record (the folder,
the inventory's problems) and for the download task (the failure message):

- ``source_problems``: a repo id and a revision that can name a folder: no
  ``..``, no leading ``/``, nothing but the hub's own characters;
- ``model_folder``: ``<model dir>/<org>--<name>/<revision>``, so that each repo
  and revision has a folder of its own (the hub forbids ``--`` in a repo id, so
  the name maps back to one repo);
- ``classify``: hf's exit status and stderr as one of ``KINDS``, anchored on
  what the CLI prints (tests/fixtures/hf-2.4.0, captured from the real client);
- ``failure_message``: what failed, for which repo, revision and endpoint, what
  to set, and the command to rerun, never the token (even where hf's own
  stderr would show it);
- ``marker``: the record written beside a completed download.

Standard library only, besides the shared ANSI stripper; nothing here raises
but ``HubModelError``.
"""
from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

from ansible.module_utils.log.ansi import strip_ansi

# The hub's repo id (huggingface_hub.utils.validate_repo_id): [org/]name, each of
# letters, digits, '-', '_' and '.', at most 96 characters, no '--' or '..'.
REPO_ID = re.compile(r"(?:[A-Za-z0-9][A-Za-z0-9._-]*/)?[A-Za-z0-9][A-Za-z0-9._-]*")
REPO_ID_MAX = 96
# A revision as this toolkit takes it: a commit hash, a branch or a tag, one
# path segment (a pull request's refs/pr/N is pinned by its commit hash).
REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
COMMIT = re.compile(r"[0-9a-f]{40}")
PUBLIC_ENDPOINT = "https://huggingface.co"
MARKER = ".vllm-fleet-download.json"

# What a failed `hf download` was, by what the CLI printed.
OK, AUTH, REPO_NOT_FOUND, REVISION_NOT_FOUND, CONNECTION, NO_CLI, FAILED = (
    "ok", "auth", "repo_not_found", "revision_not_found", "connection", "no_cli", "failed")
KINDS = (OK, AUTH, REPO_NOT_FOUND, REVISION_NOT_FOUND, CONNECTION, NO_CLI, FAILED)

# hf prints its error as "Error: <message>" (cli/_errors.py), after its own
# retry warnings. Each pattern is anchored there, so a repo or file name that
# happens to hold one of these words does not decide the kind.
_ERROR_LINE = re.compile(r"^Error: (.*)$", re.MULTILINE)
_KIND_PATTERNS = (
    # 401/403: GatedRepoError ("Access denied. Model 'x' requires approval."),
    # a bad token ("Client error '401 Unauthorized'"), HfHubHTTPError's 403.
    (AUTH, re.compile(r"^(?:Access denied\.|Client error '40[13] |40[13] (?:Client Error|Forbidden)"
                      r"|Not logged in\.)")),
    (REVISION_NOT_FOUND, re.compile(r"^Revision not found in ")),
    # RepositoryNotFoundError: an unknown repo, or (on the public hub) a private one without a token.
    (REPO_NOT_FOUND, re.compile(r"^\w+ '[^']*' not found\.|^\w+ not found\.$|^File not found in ")),
    # LocalEntryNotFoundError / IncompleteSnapshotError: the hub could not be reached.
    (CONNECTION, re.compile(r"^Local entry not found\.|^Client error '40[8]|^Server error '5\d\d "
                            r"|^Response from .* is missing the 'X-Repo-Commit' header")),
)
_CONNECTION_WORDS = re.compile(r"Connection refused|Name or service not known|Temporary failure in name resolution"
                               r"|timed out|Network is unreachable|No route to host|SSL|CERTIFICATE")
# The command module's own failure when the executable is missing.
_NO_EXECUTABLE = re.compile(r"No such file or directory")
# How much of hf's last error line a message quotes.
QUOTED_CHARS = 300


class HubModelError(ValueError):
    """An input that is no repo id, revision or exit status."""


def _text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else str(value)


def source_problems(repo_id, revision) -> list[str]:
    """Why ``repo_id`` and ``revision`` cannot name a hub model and its folder (empty: they can)."""
    problems = []
    repo = _text(repo_id)
    rev = _text(revision)
    if not REPO_ID.fullmatch(repo) or len(repo) > REPO_ID_MAX or ".." in repo or "--" in repo \
            or repo.endswith((".", "-")):
        problems.append(f"vllm_install_model_source hub:{_quoted(repo)} is no repo id: hub:<org>/<name>, each of"
                        " letters, digits, '-', '_' and '.', no '..' or '--', at most 96 characters")
    if not rev:
        problems.append(f"a hub source (hub:{_quoted(repo)}) needs vllm_install_model_revision: pin the commit hash"
                        " the model was tested at (40 hex digits, the repo's 'Files and versions' history on the hub)")
    elif not REVISION.fullmatch(rev) or ".." in rev:
        problems.append(f"vllm_install_model_revision {_quoted(rev)} is no revision: pin a commit hash (40 hex"
                        " digits), or a branch or tag of letters, digits, '-', '_' and '.' (no '/', no '..')")
    return problems


def _quoted(value: str, limit: int = 120) -> str:
    """``value`` shown in a message: printable, and cut."""
    shown = "".join(c if c.isprintable() else "?" for c in value[:limit])
    return shown + ("..." if len(value) > limit else "")


def folder_name(repo_id) -> str:
    """``org/name`` as the folder ``org--name`` (a bare ``name`` stays itself)."""
    return _text(repo_id).replace("/", "--")


def model_folder(model_dir, repo_id, revision) -> str:
    """Where a hub model lives: ``<model_dir>/<org>--<name>/<revision>``.

    ``model_dir`` itself when the repo id or revision is unusable, so that the
    record stays computable; its problems (``source_problems``) stop the run."""
    base = _text(model_dir).rstrip("/") or "/"
    if source_problems(repo_id, revision):
        return _text(model_dir)
    return f"{base.rstrip('/')}/{folder_name(repo_id)}/{_text(revision)}"


def endpoint_shown(endpoint) -> str:
    """The endpoint as a message names it: the public hub when unset, without any user:password."""
    url = _text(endpoint).strip() or PUBLIC_ENDPOINT
    try:
        parts = urlsplit(url)
        if parts.username is not None or parts.password is not None:
            host = parts.hostname or ""
            netloc = host + (f":{parts.port}" if parts.port else "")
            url = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    except ValueError:  # an unparsable URL (a bad port): shown as text, cut
        pass
    return _quoted(url, 200)


def _rc(rc) -> int | None:
    if rc is None:
        return None
    if isinstance(rc, bool):
        raise HubModelError(f"an exit status is an integer, got {rc!r}")
    if isinstance(rc, int):
        return rc
    if isinstance(rc, str) and re.fullmatch(r"-?[0-9]{1,6}", rc.strip()):
        return int(rc)
    raise HubModelError(f"an exit status is an integer, got {_quoted(_text(rc), 40)}")


def last_error(stderr) -> str:
    """hf's last ``Error:`` line, its continuation lines joined (ANSI stripped), or ''."""
    text = strip_ansi(_text(stderr)).replace("\r\n", "\n").replace("\r", "\n")
    matches = list(_ERROR_LINE.finditer(text))
    if not matches:
        return ""
    start = matches[-1].start(1)
    # The error is one block: up to hf's "Hint:" line or the end.
    block = text[start:].split("\nHint: ", 1)[0]
    return " ".join(line.strip() for line in block.split("\n") if line.strip())


def classify(rc, stderr, msg="") -> str:
    """One of ``KINDS`` for an ``hf download`` that exited ``rc`` having printed ``stderr``.

    ``msg`` is the command module's own message (a missing executable). Raises
    ``HubModelError`` only for an ``rc`` that is no integer."""
    code = _rc(rc)
    text = _text(stderr)
    if code == 0:
        return OK
    error = last_error(text)
    for kind, pattern in _KIND_PATTERNS:
        if pattern.search(error):
            return kind
    if _CONNECTION_WORDS.search(error):
        return CONNECTION
    if not error and _NO_EXECUTABLE.search(_text(msg) + "\n" + text):
        return NO_CLI
    return FAILED


def redact(text, secrets) -> str:
    """``text`` with every non-empty secret replaced by ``<redacted>``, repeatedly, so
    that no removal joins two pieces into a secret again."""
    out = _text(text)
    values = sorted({_text(s) for s in secrets or () if _text(s)}, key=len, reverse=True)
    changed = True
    while changed:
        changed = False
        for value in values:
            if value in out:
                out = out.replace(value, "")
                changed = True
    return out


_ADVICE = {
    AUTH: ("the hub refused the token (HTTP 401/403): the model is gated or private and"
           " vllm_install_hf_token is missing, wrong or lacks access. Put a token that can read it in the vault"
           " (vllm_install_hf_token: \"{{ vault_hf_token }}\", group_vars/vllm_engines/vault.yml), and accept"
           " the model's terms on the hub if it is gated"),
    REPO_NOT_FOUND: ("the hub knows no such repo (HTTP 404, or 401 for a private one without a token). Check"
                     " vllm_install_model_source (hub:<org>/<name>), and set vllm_install_hf_token in the vault"
                     " if the repo is private"),
    REVISION_NOT_FOUND: ("the repo has no such revision (HTTP 404). Set vllm_install_model_revision to a commit"
                         " hash of the repo (40 hex digits, its 'Files and versions' history)"),
    CONNECTION: ("the hub could not be reached (connection refused, no such host, a timeout or a server"
                 " error). Check the host's route to the endpoint, or set vllm_install_hf_endpoint to a"
                 " reachable hub mirror; a rerun keeps the files already complete"),
    NO_CLI: ("the venv has no hf command: vllm_install installs huggingface_hub with vLLM; rerun the install"
             " (--tags vllm_install_install), or add huggingface_hub to vllm_install_extra_requirements"),
    FAILED: "hf download failed",
}


def failure_message(kind, *, repo_id, revision, endpoint, folder, host="", rerun="", hf_error="",
                    secrets=()) -> str:
    """What failed and what to do, for a ``kind`` other than ``OK``; never a secret.

    ``hf_error`` (hf's last error line, ``last_error``) is quoted, cut, with
    every secret removed. Raises ``HubModelError`` for an unknown kind."""
    if kind not in KINDS or kind == OK:
        raise HubModelError(f"no failure kind: {_quoted(_text(kind), 40)}")
    where = f" on {_text(host)}" if _text(host) else ""
    quoted = _quoted(" ".join(redact(hf_error, secrets).split()), QUOTED_CHARS)
    said = f" hf said: {quoted}." if quoted else ""
    then = f" Then rerun: {_text(rerun)}" if _text(rerun) else ""
    message = (f"Downloading hub:{_quoted(_text(repo_id))} at revision {_quoted(_text(revision))} from"
               f" {endpoint_shown(endpoint)} into {_quoted(_text(folder), 200)}{where} failed:"
               f" {_ADVICE[kind]}.{said} The engine was not changed.{then}")
    return redact(message, secrets)


def marker(repo_id, revision, endpoint, metadata="") -> dict:
    """The record of a completed download. ``metadata`` is hf's own
    ``.cache/huggingface/download/config.json.metadata`` (commit hash, etag,
    time, a line each): its commit is the one the hub answered."""
    first = _text(metadata).split("\n", 1)[0].strip()
    return {"repo": _text(repo_id), "revision": _text(revision), "endpoint": endpoint_shown(endpoint),
            "commit": first if COMMIT.fullmatch(first) else None}
