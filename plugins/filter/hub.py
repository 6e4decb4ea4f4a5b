"""Filters of a hub model's download (vllm_install's tasks/model.yml).

The logic lives in ``plugins/module_utils/hub_model.py``; filter plugins
cannot import the project's module_utils through ``ansible.module_utils``, so
it is loaded by file path, after the ``ansi.py`` it imports.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from ansible.errors import AnsibleFilterError

_DIR = Path(__file__).resolve().parent.parent / "module_utils"


def _load(stem: str, name: str):
    """plugins/module_utils/<stem>.py as the module ``name``."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, _DIR / ("%s.py" % stem))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _logic():
    # Under the name the logic imports it by, as Ansible ships it to a module.
    _load("ansi", "ansible.module_utils.ansi")
    return _load("hub_model", "vllm_fleet_hub_model_logic")


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
