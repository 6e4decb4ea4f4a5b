"""Property tests for plugins/module_utils/kv/not_found.py over hostile input:
time linear in the input, over the inputs that once took more (tests/kv_logs.py)."""
from __future__ import annotations

import hostile
import pytest
from ansible.module_utils.kv.not_found import gather_hints
from ansible.module_utils.kv.sources import text_chunks
from hostile import FLOOR_S, SMALL_INPUT
from kv_logs import BUILDS


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_diagnosis_time_is_linear(name):
    hostile.assert_linear(lambda text: gather_hints(text_chunks(text)), BUILDS[name], small=SMALL_INPUT,
                          noise_s=FLOOR_S)
