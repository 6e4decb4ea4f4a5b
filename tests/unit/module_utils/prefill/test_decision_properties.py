"""Property tests for plugins/module_utils/prefill/decision.py over hostile input
(tests/hostile.py): ``baseline_from_json`` over cut, deep, mis-shaped and huge
JSON; the statistics over samples of any type. (``parse_metrics`` and
``passive_window``: test_metrics_properties.py.)

What each promises: PrefillError and nothing else; every raw figure a
baseline holds (a sample, a prompt length) is written in ASCII digits in the
input.
"""
from __future__ import annotations

import json
import math

import pytest
from ansible.module_utils.prefill import decision as p
from hostile import (
    HUGE_NUMBER,
    any_text,
    assert_numbers_from,
    mutated,
    nested,
    non_ascii_number,
    raises_only,
)
from hypothesis import given, settings
from hypothesis import strategies as st

# --- baseline_from_json -------------------------------------------------------------------------

GOOD = p.Baseline("0.32.0", "/srv/models/tiny", 1024, "2026-12-01T03:30:00+00:00",
                  ((0.040, 0.041, 0.043, 0.050), (0.041, 0.040, 0.042, 0.060)))
GOOD_JSON = p.baseline_to_json(GOOD)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=20)
    | st.integers(min_value=10 ** 300, max_value=10 ** 4000),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=20)


def baseline_numbers(b: p.Baseline) -> list:
    return [b.prompt_tokens] + [x for g in b.groups for x in g]


def loaded(text):
    b = raises_only(p.PrefillError, p.baseline_from_json, text)
    if b is not None:
        assert_numbers_from(baseline_numbers(b), text if isinstance(text, str) else text.decode("utf-8", "replace"))
        assert p.baseline_from_json(p.baseline_to_json(b)) == b
    return b


def test_every_cut_of_a_baseline_fails():
    for at in range(len(GOOD_JSON)):
        cut = GOOD_JSON[:at]
        if cut.rstrip() == GOOD_JSON.rstrip():
            continue
        with pytest.raises(p.PrefillError):
            p.baseline_from_json(cut)


@given(any_text(2000))
def test_baseline_of_arbitrary_text(text):
    loaded(text)


@given(mutated(GOOD_JSON.splitlines()), st.sampled_from(GOOD_JSON.splitlines()))
def test_baseline_with_one_mutated_line(line, replaced):
    loaded(GOOD_JSON.replace(replaced, line, 1))


@given(st.dictionaries(st.sampled_from(["schema", "vllm_version", "model", "prompt_tokens", "recorded_at", "groups",
                                        "unit", "other"]), JSON_VALUES))
def test_baseline_of_any_shape(extra):
    data = dict(json.loads(GOOD_JSON), **extra)
    loaded(json.dumps(data))


@given(JSON_VALUES)
def test_baseline_of_any_json(value):
    loaded(json.dumps(value))


@given(st.lists(st.lists(st.one_of(st.floats(), st.integers(), st.integers(min_value=10 ** 300, max_value=10 ** 4000),
                                   st.text(max_size=3), st.none()), min_size=4, max_size=4), min_size=2, max_size=3))
def test_baseline_groups_of_any_numbers(groups):
    loaded(json.dumps(dict(json.loads(GOOD_JSON), groups=groups)))


@pytest.mark.parametrize("text, match", [
    (nested(10000), "not JSON"),
    ('{"a": ' * 10000 + "1" + "}" * 10000, "not JSON"),
    (GOOD_JSON.replace('"model": "/srv/models/tiny"', '"model": ' + nested(200)), "model"),
    (GOOD_JSON.replace('"model": "/srv/models/tiny"', '"model": ' + nested(10000)), "not JSON"),
    (GOOD_JSON.replace("0.043", "1" + "0" * 4000), "finite time"),       # float(int) raised OverflowError
    (GOOD_JSON.replace("0.043", HUGE_NUMBER), "not JSON"),               # past int()'s 4,300 digits
    (GOOD_JSON.replace("0.043", "1e999"), "finite time"),
    (GOOD_JSON.replace("1024", "1" + "0" * 4000), "prompt_tokens"),
    (GOOD_JSON.replace("1024", str(p.MAX_PROMPT_TOKENS + 1)), "prompt_tokens"),
    (GOOD_JSON.replace('"schema": 1', '"schema": true'), "schema"),
    (GOOD_JSON.replace('"schema": 1', '"schema": 1.0'), "schema"),
    (GOOD_JSON.replace('"schema": 1', '"schema": 1, "schema": 1'), "schema' twice"),
    (GOOD_JSON.replace('"model": "/srv/models/tiny"', '"model": "a", "model": "b"'), "model' twice"),
    (GOOD_JSON.replace("2026", non_ascii_number("2026")), "ISO 8601"),
    (GOOD_JSON.replace("2026-12-01T03:30:00+00:00", "0001-01-01T00:00:00"), "ISO 8601"),
    (GOOD_JSON.replace('"unit": "seconds_per_token"', '"unit": ["seconds_per_token"]'), "unit"),
    (GOOD_JSON.replace('"unit": "seconds_per_token"', '"unit": {"a": 1}'), "unit"),
    (GOOD_JSON.replace('"/srv/models/tiny"', json.dumps("\x1b[31m" * 1000)), None),
    (GOOD_JSON.rstrip()[:-1] + "".join(', "x%d": 1' % i for i in range(10000)) + "}", "unknown keys x0, x1,"),
    (" " * (p.MAX_BASELINE + 1), "over"),
])
def test_baseline_rejects_hostile_json(text, match):
    b = loaded(text)
    if match is None:
        assert b is not None and b.model == "\x1b[31m" * 1000
        return
    assert b is None
    with pytest.raises(p.PrefillError, match=match) as got:
        p.baseline_from_json(text)
    assert len(str(got.value)) < 600
    assert "\x1b" not in str(got.value)


@pytest.mark.parametrize("value", [None, 12, [GOOD_JSON], {"schema": 1}])
def test_baseline_of_other_types(value):
    with pytest.raises(p.PrefillError, match="str or bytes"):
        p.baseline_from_json(value)


@given(st.fixed_dictionaries({
    "vllm_version": JSON_VALUES, "model": JSON_VALUES, "prompt_tokens": JSON_VALUES, "recorded_at": JSON_VALUES,
    "groups": JSON_VALUES, "unit": JSON_VALUES}))
def test_baseline_constructor_of_any_values(kw):
    raises_only(p.PrefillError, p.Baseline, **kw)


# --- the statistics take any samples ----------------------------------------------------------

SAMPLES = st.lists(st.one_of(st.floats(), st.integers(), st.integers(min_value=10 ** 300, max_value=10 ** 5000),
                             st.booleans(), st.none(), st.text(max_size=3)), max_size=6)


@given(SAMPLES, st.one_of(st.none(), SAMPLES))
@settings(max_examples=200)
def test_statistics_of_any_samples(first, more):
    raises_only(p.PrefillError, p.statistic, first)
    verdict = raises_only(p.PrefillError, p.decide, GOOD, first, more)
    if verdict is not None:
        assert verdict.ratio is None or math.isfinite(verdict.ratio)


# --- the module reads any baseline file -------------------------------------------------------

@pytest.mark.parametrize("content, reason", [
    (None, "is unreadable: Is a directory"),                          # a traceback before
    (nested(10000).encode(), "is unusable: baseline file is not JSON"),
    (GOOD_JSON.replace("0.043", "1" + "0" * 4000).encode(), "is unusable: baseline group 0[2] is an integer"),
    (GOOD_JSON.replace("2026-12-01T03:30:00+00:00", "0001-01-01T00:00:00").encode(),
     "is unusable: baseline recorded_at"),
    (b"\xff" * (p.MAX_BASELINE + 10), "is unusable: baseline file is %d bytes, over" % (p.MAX_BASELINE + 1)),
])
def test_module_with_a_hostile_baseline_file(run_module, tmp_path, content, reason):
    import vllm_prefill_probe as module
    from prefill_fake import MODEL, FakeVllm

    path = tmp_path / "prefill-baseline.json"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    with FakeVllm(trim=True) as fake:
        result = run_module(module, {"url": fake.url, "model": MODEL, "prompt_tokens": 32, "baseline_path": str(path),
                                     "window": 0.5, "timeout": 2})
    assert "failed" not in result
    assert (result["verdict"], result["baseline"]) == ("inconclusive", None)
    assert result["reason"].startswith("baseline %s %s" % (path, reason)), result["reason"]
