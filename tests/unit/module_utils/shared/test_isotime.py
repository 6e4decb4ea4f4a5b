"""Tests for plugins/module_utils/shared/isotime.py: the one strict reader of
the ISO 8601 times the toolkit writes (a baseline's and a golden set's
recorded_at); the two readers' property tests feed it hostile text too."""
from __future__ import annotations

import pytest
from ansible.module_utils.shared.isotime import iso_timestamp


@pytest.mark.parametrize("text, want", [
    ("2026-12-05T17:00:00+00:00", 1796490000.0),
    ("2026-12-05T18:00:00+01:00", 1796490000.0),
    ("1970-01-01T00:00:00+00:00", 0.0),
])
def test_reads_what_the_toolkit_writes(text, want):
    assert iso_timestamp(text) == want


@pytest.mark.parametrize("text", [
    "", "yesterday", "2026-13-01T00:00:00", "２０２６-12-05T17:00:00+00:00", "٢٠٢٦-12-05",
    "0001-01-01T00:00:00", None, 1796490000, b"2026-12-05",
])
def test_anything_else_is_a_value_error(text):
    with pytest.raises(ValueError):
        iso_timestamp(text)
