"""Tests for plugins/module_utils/flags/settings.py: the source names are the
words vllm_flags_info's RETURN promises."""
from __future__ import annotations

import re

from ansible.module_utils.flags.settings import SOURCE_CMDLINE, SOURCE_DEFAULT, SOURCE_LOG, Setting, Unknown
from module_docs import module_doc


def test_sources_are_the_documented_words():
    returned = module_doc("vllm_flags_info.py", "RETURN")
    mismatch = set(re.findall(r"V\(([^)]+)\)", returned["mismatches"]["contains"]["source"]["description"]))
    unsupported = set(re.findall(r"V\(([^)]+)\)", returned["unsupported"]["contains"]["source"]["description"]))
    assert mismatch == {SOURCE_CMDLINE, SOURCE_LOG, SOURCE_DEFAULT}
    assert unsupported == {SOURCE_CMDLINE, SOURCE_LOG, "expect", "forbid"}


def test_defaults():
    assert Setting("watermark", 0.1, "--watermark 0.1").source == SOURCE_CMDLINE
    assert Unknown("--bogus", SOURCE_LOG, "'bogus': 1").reason == "unknown"
