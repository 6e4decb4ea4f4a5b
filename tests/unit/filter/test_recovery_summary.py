"""plugins/filter/diagnosis.py's recovery_summary: diagnose.yml's report of what the
power-cut recovery did last, from a slurp of the head's recover-state.json."""
from __future__ import annotations

import base64
import json

import pytest
from filter_plugins import load_filters

recovery_summary = load_filters("diagnosis")["recovery_summary"]


def slurp(text: str) -> dict:
    return {"content": base64.b64encode(text.encode()).decode(), "encoding": "base64"}


@pytest.mark.parametrize("slurped,expected", [
    # No file (the recovery never ran), or the slurp skipped on a worker.
    ({"failed": True, "msg": "file not found"}, None),
    ({"skipped": True}, None),
    (slurp(json.dumps({"schema": 1, "attempts": 3, "last_action": "give-up", "gave_up": True, "at": 1.5,
                       "last_reason": "gave up after 3 attempt(s): node(s) 10.0.0.12 did not join within 180 s"})),
     {"attempts": 3, "last_action": "give-up", "gave_up": True, "at": 1.5,
      "last_reason": "gave up after 3 attempt(s): node(s) 10.0.0.12 did not join within 180 s"}),
    (slurp("\x00not json"), {"attempts": None, "last_action": "unreadable", "last_reason": "the state file is not JSON",
                             "at": None, "gave_up": None}),
    # Look-alikes of the right types are not taken.
    (slurp(json.dumps({"attempts": "3", "gave_up": "false", "last_action": 7})),
     {"attempts": None, "last_action": None, "last_reason": "", "at": None, "gave_up": None}),
])
def test_recovery_summary(slurped, expected):
    assert recovery_summary(slurped) == expected
