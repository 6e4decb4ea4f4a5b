"""Tests for plugins/module_utils/shared/pyrepr.py (the real reprs it reads are in
flags/test_bootlog.py and flags/test_help.py)."""
from __future__ import annotations

import pytest
from ansible.module_utils.shared.pyrepr import ReprError, parse_repr


@pytest.mark.parametrize("text,value", [
    ("{}", {}),
    ("{'a': 1, 'b': -2.5e3, 'c': None, 'd': True,}", {"a": 1, "b": -2500.0, "c": None, "d": True}),
    ("[1, (2, 3), {'x': 'y'}]", [1, (2, 3), {"x": "y"}]),
    ("{'f': X(a='(', b=[1, ')'], c={'k': \"v)\"})}", {"f": "X(a='(', b=[1, ')'], c={'k': \"v)\"})"}),
    ("{'t': <Enum.A: 'a>b'>, 'd': torch.bfloat16}", {"t": "<Enum.A: 'a>b'>", "d": "torch.bfloat16"}),
    ("{'i': inf, 'n': -inf}", {"i": float("inf"), "n": float("-inf")}),
    ("{1, 2}", [1, 2]),
    ("'it\\'s'", "it's"),
])
def test_parse_repr(text, value):
    assert parse_repr(text) == value


@pytest.mark.parametrize("text", ["{'a': }", "{'a': 1", "'open", "{'a' 1}", "[1] x", "KV(a=1"])
def test_parse_repr_errors(text):
    with pytest.raises(ReprError):
        parse_repr(text)
