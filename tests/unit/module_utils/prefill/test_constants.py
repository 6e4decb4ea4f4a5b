"""The prefill probe's defaults are one fact each: the role default the
playbooks pass (roles/vllm_fleet_defaults), its argument spec, the Python
constant in plugins/module_utils/prefill/decision.py and the module's own
default are the same number. (The module's DOCUMENTATION is held to its
argument spec by tests/unit/library/test_module_docs.py.)"""
from __future__ import annotations

from pathlib import Path

import pytest
import vllm_prefill_probe as module
import yaml
from ansible.module_utils.prefill import decision

ROLE = Path(__file__).resolve().parents[4] / "roles" / "vllm_fleet_defaults"
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
SPECS = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]

# role variable -> (the Python constant, the module option that defaults to it)
SAME = {
    "vllm_fleet_prefill_threshold_floor": (decision.FLOOR, "threshold_floor"),
    "vllm_fleet_probe_prompt_tokens": (decision.PROMPT_TOKENS, "prompt_tokens"),
}


@pytest.mark.parametrize("variable", sorted(SAME))
def test_the_role_default_is_the_constant(variable):
    constant, option = SAME[variable]
    assert type(DEFAULTS[variable]) is type(constant)
    assert DEFAULTS[variable] == constant, f"{variable} in defaults/main.yml"
    assert SPECS[variable]["default"] == constant, f"{variable} in meta/argument_specs.yml"
    assert module.ARGUMENT_SPEC[option]["default"] == constant, f"vllm_prefill_probe's {option}"


def test_the_check_can_fail():
    assert DEFAULTS["vllm_fleet_prefill_threshold_floor"] != decision.FLOOR + 0.01
