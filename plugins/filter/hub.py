"""Filters of a hub model's download (vllm_install's tasks/model.yml).

The logic lives in ``plugins/module_utils/fleet/hub_model.py``, imported at the
first call.
"""
from __future__ import annotations

import runpy
from pathlib import Path

from ansible.errors import AnsibleFilterError

# Makes plugins/module_utils importable as ansible.module_utils, as for a module.
runpy.run_path(str(Path(__file__).resolve().parents[1] / "module_utils_path.py"))


def _logic():
    from ansible.module_utils.fleet import hub_model

    return hub_model


def hub_download_failure(result, repo_id, revision, endpoint, folder, host="", rerun="", token=""):
    """The registered result of `hf download` -> '' when it succeeded, else the
    failure's message (what failed, what to set, the command to rerun), without
    the token."""
    logic = _logic()
    result = result if isinstance(result, dict) else {}
    try:
        kind = logic.classify(result.get("rc"), result.get("stderr"), result.get("msg"))
        if kind == logic.OK:
            return ""
        return logic.failure_message(kind, repo_id=repo_id, revision=revision, endpoint=endpoint, folder=folder,
                                     host=host, rerun=rerun, hf_error=logic.last_error(result.get("stderr")),
                                     secrets=[token])
    except logic.HubModelError as exc:
        raise AnsibleFilterError(str(exc)) from None


def hub_download_marker(metadata, repo_id, revision, endpoint=""):
    """hf's config.json.metadata text -> the record of a completed download."""
    return _logic().marker(repo_id, revision, endpoint, metadata)


class FilterModule:
    def filters(self):
        return {"hub_download_failure": hub_download_failure, "hub_download_marker": hub_download_marker}
