"""The filters work as Ansible runs them: in a process where the project's
module_utils are not importable as ``ansible.module_utils`` (the tests'
conftest makes them so), each makes them so itself (plugins/module_utils_path.py),
imports shared/numeric.py and the logic that imports it, and reads a number past
range without raising anything but AnsibleFilterError.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

FILTER_DIR = Path(__file__).resolve().parents[3] / "plugins" / "filter"

CALLS = {
    "fleet": "f['vllm_argv']({'max_model_len': 10 ** 400})",
    "diagnosis": "f['engine_diagnosis']({'verdict': 'healthy', 'ratio': 10 ** 5000})['verdict']",
    "restart": "f['restart_pool_check'](10 ** 5000, 4736, 0.05)['message']",
    "hub": "f['hub_download_failure']({'rc': 1, 'stderr': 'Error: Revision not found in model'}, 'o/n', 'r', '',"
           " '/srv/m', token='t')",
    "gpu_preflight": "f['gpu_preflight_clock_skew']([{'name': 'a', 'rank': 0}], "
                     "{'a': {'r': {'clock_offset_s': 1e999}}}, 2, 'e', 'r')['detail']",
}

SCRIPT = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("under_test", sys.argv[1])
plugin = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plugin)
f = plugin.FilterModule().filters()
print(repr({call}))
"""


@pytest.mark.parametrize("stem", sorted(CALLS))
def test_the_filter_imports_its_module_utils_in_a_fresh_process(stem):
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(call=CALLS[stem]), str(FILTER_DIR / f"{stem}.py")],
                         capture_output=True, text=True, timeout=60, cwd="/")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip()
