"""Tests for plugins/module_utils/flags/secrets_mask.py."""
from __future__ import annotations

import pytest
from ansible.module_utils.flags.secrets_mask import MASK, mask_argv


@pytest.mark.parametrize("argv,masked", [
    (["vllm", "serve", "/m", "--api-key", "a", "b", "-tp", "2"],
     ["vllm", "serve", "/m", "--api-key", MASK, MASK, "-tp", "2"]),
    (["vllm", "serve", "--hf-token=hf_abc", "--api_key=k"],
     ["vllm", "serve", f"--hf-token={MASK}", f"--api_key={MASK}"]),
    (["env", "HF_TOKEN=hf_abc", "VLLM_API_KEY=k", "VLLM_HOST_IP=10.0.0.1", "vllm"],
     ["env", f"HF_TOKEN={MASK}", f"VLLM_API_KEY={MASK}", "VLLM_HOST_IP=10.0.0.1", "vllm"]),
    (["vllm", "serve", "--api-k", "x"], ["vllm", "serve", "--api-k", MASK]),
    (["vllm", "serve", "--hf-token", "hf_x", "/m"], ["vllm", "serve", "--hf-token", MASK, "/m"]),
    (["/bin/bash", "-c", "exec vllm serve /m --api-key k -tp 2"],
     ["/bin/bash", "-c", f"exec vllm serve /m --api-key {MASK} -tp 2"]),
    (["vllm", "serve", "/m", "--served-model-name", "a b"],
     ["vllm", "serve", "/m", "--served-model-name", "a b"]),
])
def test_mask_argv(table, argv, masked):
    assert mask_argv(argv, table) == masked
