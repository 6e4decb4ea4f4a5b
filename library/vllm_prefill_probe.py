#!/usr/bin/python
# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Time an engine's prefill against its own baseline (logic: module_utils/prefill/)."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_prefill_probe
short_description: Tell whether a vLLM engine's prefill got slower than right after its start
description:
  - With O(mode=probe), sends at most 4 one-token completions after one discarded warm-up, each with a fresh
    C(cache_salt) so no block is a prefix-cache hit, on one kept-alive connection, and compares the engine's
    own prefill time per prompt token (from C(vllm:request_prefill_time_seconds_sum)) with the baseline at
    O(baseline_path). The verdict is C(healthy), C(degraded) (with the ratio), C(inconclusive) (with the reason,
    busy, too noisy, no or another baseline, no answer) or C(down).
  - While requests run or wait (C(vllm:num_requests_running), C(vllm:num_requests_waiting)) it first reads
    two C(/metrics) scrapes O(window) seconds apart (RV(passive)). Until 4 prefills finished in it, the window
    widens by O(window) at a time up to O(window_max); it stops at once when no token was computed. Then, with
    O(timed) and nothing waiting, it takes the same samples, each timed by the engine itself
    (C(metrics.time_to_first_token_ms) of a completion, C(--enable-per-request-metrics)), and judges them
    against the threshold widened by O(load_margin) (RV(timed)). Otherwise it answers C(inconclusive), never
    C(degraded).
  - With O(mode=baseline), records O(groups) groups of 4 samples on a quiet engine and writes them, with the
    vLLM version, the model, the prompt length and the time, to O(baseline_path). With O(unit), a baseline
    already recorded since the unit's start is kept, so reruns change nothing.
  - The rule and its constants (mean of the fastest 2 of 4, a threshold from the baseline's own noise, two
    stages) are in C(docs/diagnose.md) of this repository.
  - Needs Python 3.11 or newer (its linear C(/metrics) parser), which the Python that runs vLLM is; run it on
    the engine's head with C(ansible_python_interpreter) set to the vLLM venv's python.
options:
  url:
    description: The engine's base URL, for example C(http://10.0.0.11:8000) (http only; a C(/v1) suffix is dropped).
    type: str
    required: true
  model:
    description: The served model name the completions ask for.
    type: str
    required: true
  mode:
    description: C(probe) gives a verdict; C(baseline) records the baseline.
    type: str
    choices: [probe, baseline]
    default: probe
  prompt_tokens:
    description: Prompt length of every sample, counted with the engine's C(/tokenize); 16 to 16777216.
    type: int
    default: 4096
  baseline_path:
    description: The baseline file on this host.
    type: path
    required: true
  groups:
    description: Groups of 4 samples a baseline records (O(mode=baseline)); 2 to 16.
    type: int
    default: 2
  window:
    description: Seconds between the two C(/metrics) scrapes of the passive reading, at the least; 0.5 to 300.
    type: float
    default: 5
  window_max:
    description: The longest the passive reading's window widens to while fewer than 4 prefills finished
      in it; 0.5 to 600, and never shorter than O(window).
    type: float
    default: 60
  timeout:
    description: Seconds one completion may take. A completion that takes longer while C(/health) answers 200
      gives RV(answered=false), the wedged engine's sign.
    type: float
    default: 20
  unit:
    description: The engine's systemd unit; gives RV(uptime_s), and keeps a baseline recorded since its start.
    type: str
  refresh:
    description: Record a new baseline even when one was recorded since the unit's start.
    type: bool
    default: false
  keep_known_good:
    description:
      - With O(mode=baseline), keep the baseline on the host when the one just measured is for the same vLLM
        version, model and prompt length and slower past its threshold (RV(verdict=slower), RV(ratio)). A start
        of the same launch is as fast as the known-good one was; a slower one is a fault that outlived it, and
        recording it would hide it from the diagnosis. Off after a change that may change the speed (flags).
    type: bool
    default: false
  threshold_floor:
    description:
      - The least slow-down ratio ever called C(degraded), whatever the baseline's own noise; 1.0 to 10.
      - Two baseline groups taken back to back cannot see a site's run-to-run noise. Measure it once with
        C(bench/prefill_detect.py record) and C(replay) (C(docs/diagnose.md)); the default suits a quiet GPU host.
    type: float
    default: 1.12
  api_key:
    description: The engine's C(--api-key), sent as a bearer token. Never logged.
    type: str
  timed:
    description:
      - The engine's API server times each request (C(--enable-per-request-metrics)), so a loaded engine is
        sampled too. Off, or an engine whose answers carry no timing, a loaded engine gets only the passive
        reading.
    type: bool
    default: false
  load_margin:
    description: How much wider the threshold is for samples taken under load (traffic only adds rows to a
      sample's engine step); 1.0 to 4.
    type: float
    default: 1.25
attributes:
  check_mode:
    support: full
    details: O(mode=probe) only reads (it sends completions, which change nothing). O(mode=baseline) sends
      nothing in check mode and reports whether it would record.
  diff_mode:
    support: none
seealso:
  - module: vllm_kv_cache_info
    description: The pool the diagnosis weighs the waiting requests against.
author:
  - vllm-fleet developers
"""

EXAMPLES = r"""
- name: Record the baseline right after a verified start
  vllm_prefill_probe:
    url: http://10.0.0.11:8000
    model: big-model
    mode: baseline
    unit: vllm.service
    baseline_path: /var/lib/vllm-fleet/prefill-baseline.json
  vars:
    ansible_python_interpreter: /opt/vllm/venv/bin/python

- name: Probe
  vllm_prefill_probe:
    url: http://10.0.0.11:8000
    model: big-model
    unit: vllm.service
    baseline_path: /var/lib/vllm-fleet/prefill-baseline.json
  vars:
    ansible_python_interpreter: /opt/vllm/venv/bin/python
  register: probe
"""

RETURN = r"""
verdict:
  description: C(healthy), C(degraded), C(inconclusive) or C(down); with O(mode=baseline), C(recorded), C(kept),
    C(slower) (with O(keep_known_good), the known-good baseline stays and RV(reference) is the new measurement's),
    C(inconclusive) or C(down).
  returned: always
  type: str
  sample: healthy
reason:
  description: Why, in a sentence.
  returned: always
  type: str
timed:
  description: With O(mode=probe) on a loaded engine, whether the verdict comes from samples the engine timed
    itself (each RV(samples) entry then says C(timed_by=engine)); null on a quiet one.
  returned: always
  type: bool
passive_judged:
  description: With O(mode=probe) on a loaded engine without a timed verdict, whether the passive rate may be
    judged (false for an engine that times its requests, since other traffic shapes inflate that rate); else null.
  returned: always
  type: bool
ratio:
  description: The probe's statistic over the baseline's (1.0 is as fast as after the start), or null; with
    RV(verdict=slower), the new measurement's over the known-good baseline's.
  returned: always
  type: float
threshold:
  description: The ratio at and above which the probe is C(degraded), from the baseline's noise and
    O(threshold_floor). Also given with the passive reading of a busy engine, for the diagnosis to weigh
    RV(passive) against; null without a baseline that applies.
  returned: always
  type: float
noise:
  description: The baseline's recorded noise, how far its own groups vary (1.0 is not at all); RV(threshold) is at
    least this times 1.05.
  returned: when the samples were compared with the baseline (O(mode=probe)), and when O(mode=baseline) recorded one
  type: float
reference:
  description: The baseline's seconds of engine prefill per prompt token (the geometric mean of its groups'
    statistics), which RV(ratio) divides by; the upgrade compares the candidate's new baseline with it.
  returned: when the samples or a passive reading were compared with the baseline (O(mode=probe)), and when
    O(mode=baseline) recorded one
  type: float
too_noisy:
  description: Whether the recorded baseline varies too much to see a 1.3x slow-down; RV(reason) then says from
    which ratio probes against it call C(degraded).
  returned: when O(mode=baseline) recorded a baseline
  type: bool
samples:
  description: Each sample's engine-side prefill seconds, the client's seconds, the prompt tokens the engine
    counted, and seconds per token. The warm-up is not among them.
  returned: always
  type: list
  elements: dict
  contains:
    server_seconds:
      description: The change in C(vllm:request_prefill_time_seconds_sum) across the sample.
      type: float
    client_seconds:
      description: The client's time from sending the completion to its answer.
      type: float
    prompt_tokens:
      description: The prompt tokens the completion's usage counted.
      type: int
    seconds_per_token:
      description: RV(samples[].server_seconds) over RV(samples[].prompt_tokens).
      type: float
answered:
  description: Whether the warm-up completion came back; false with RV(health_status=200) is a wedged engine;
    null when none was sent.
  returned: always
  type: bool
busy:
  description: Whether requests ran or waited, so no probe was sent (null when the engine is down).
  returned: always
  type: bool
passive:
  description: The passive reading over C(window_s) seconds (seconds per computed prompt token, requests, tokens,
    preemptions in the window, C(progress) whether any token was computed, the ratio to the baseline), or null
    when the probe ran.
  returned: always
  type: dict
metrics_before:
  description: The first C(/metrics) scrape's figures (running, waiting, waiting for capacity, KV usage,
    preemptions, prefill sums), or null when the engine is down.
  returned: always
  type: dict
metrics_after:
  description: The passive reading's second scrape, or null.
  returned: always
  type: dict
health_status:
  description: The HTTP status of C(/health), or null when nothing answered.
  returned: always
  type: int
vllm_version:
  description: What C(/version) answered, or null when the engine is down.
  returned: always
  type: str
prompt_tokens:
  description: The prompt length the engine counted for the samples (O(prompt_tokens) until a prompt is built).
  returned: always
  type: int
uptime_s:
  description: Seconds since the unit last entered C(active), or null without O(unit).
  returned: always
  type: float
baseline:
  description: The baseline in use or recorded (version, model, prompt tokens, time, groups), or null.
  returned: always
  type: dict
"""

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host.systemd import active_since, parse_show
from ansible.module_utils.prefill.client import EngineClient
from ansible.module_utils.prefill.decision import (
    FLOOR,
    LOAD_MARGIN,
    MAX_BASELINE,
    MAX_GROUPS,
    MAX_PROMPT_TOKENS,
    MIN_GROUPS,
    PROMPT_TOKENS,
    baseline_from_json,
    baseline_to_json,
)
from ansible.module_utils.prefill.errors import PrefillError
from ansible.module_utils.prefill.probe import keep_baseline, keep_known_good, probe, record
from ansible.module_utils.shared.numeric import shown

ARGUMENT_SPEC = dict(
    url=dict(type="str", required=True),
    model=dict(type="str", required=True),
    mode=dict(type="str", choices=["probe", "baseline"], default="probe"),
    prompt_tokens=dict(type="int", default=PROMPT_TOKENS),
    baseline_path=dict(type="path", required=True),
    groups=dict(type="int", default=2),
    window=dict(type="float", default=5.0),
    window_max=dict(type="float", default=60.0),
    timeout=dict(type="float", default=20.0),
    unit=dict(type="str"),
    refresh=dict(type="bool", default=False),
    keep_known_good=dict(type="bool", default=False),
    threshold_floor=dict(type="float", default=FLOOR),
    timed=dict(type="bool", default=False),
    load_margin=dict(type="float", default=LOAD_MARGIN),
    api_key=dict(type="str", no_log=True),
)


def _check(module):
    p = module.params
    # The argspec's int turns "1e999" into a 1,000-digit int (shown() quotes it): no prompt is built that long.
    if not 16 <= p["prompt_tokens"] <= MAX_PROMPT_TOKENS:
        module.fail_json(msg="prompt_tokens must be between 16 and %d, got %s." % (MAX_PROMPT_TOKENS,
                                                                                 shown(p["prompt_tokens"])))
    if not MIN_GROUPS <= p["groups"] <= min(16, MAX_GROUPS):
        module.fail_json(msg="groups must be between %d and 16, got %s." % (MIN_GROUPS, shown(p["groups"])))
    if not 0.5 <= p["window"] <= 300:
        module.fail_json(msg="window must be between 0.5 and 300 seconds, got %g." % p["window"])
    if not 0.5 <= p["window_max"] <= 600:
        module.fail_json(msg="window_max must be between 0.5 and 600 seconds, got %g." % p["window_max"])
    if not 1.0 <= p["threshold_floor"] <= 10.0:
        module.fail_json(msg="threshold_floor must be between 1.0 and 10, got %g." % p["threshold_floor"])
    if not 1.0 <= p["load_margin"] <= 4.0:
        module.fail_json(msg="load_margin must be between 1.0 and 4, got %g." % p["load_margin"])
    if not 0 < p["timeout"] <= 3600:
        module.fail_json(msg="timeout must be between 0 and 3600 seconds, got %g." % p["timeout"])


def _started_at(module, unit):
    """The unit's ActiveEnterTimestamp as epoch seconds, or None when it is not active."""
    rc, out, err = module.run_command(
        ["systemctl", "show", unit, "--timestamp=unix", "-p", "ActiveEnterTimestamp", "-p", "ActiveState"])
    if rc != 0:
        module.fail_json(msg="systemctl show %s failed (rc %d): %s" % (unit, rc, err.strip()))
    return active_since(parse_show(out))


def _load(path):
    """The baseline at path, or (None, why)."""
    if not os.path.exists(path):
        return None, "no baseline at %s: it is recorded right after a verified start" % path
    try:
        with open(path, "rb") as fh:
            return baseline_from_json(fh.read(MAX_BASELINE + 1)), ""
    except PrefillError as exc:
        return None, "baseline %s is unusable: %s" % (path, exc)
    except OSError as exc:  # a directory, no permission
        return None, "baseline %s is unreadable: %s" % (path, exc.strerror or exc)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    _check(module)
    p = module.params
    started = _started_at(module, p["unit"]) if p["unit"] else None
    uptime = None if started is None else max(0.0, time.time() - started)
    baseline, why = _load(p["baseline_path"])
    common = dict(changed=False, uptime_s=uptime,
                  baseline=None if baseline is None else json.loads(baseline_to_json(baseline)))
    try:
        # Inside the try: a bad url is a PrefillError too.
        with EngineClient(p["url"], timeout=p["timeout"], api_key=p["api_key"]) as client:
            if p["mode"] == "probe":
                result = probe(client, p["model"], p["prompt_tokens"], baseline, p["window"], p["timeout"],
                               p["threshold_floor"], p["window_max"], missing=why, timed=p["timed"],
                               load_margin=p["load_margin"])
                module.exit_json(**dict(common, **result))
            keep = keep_baseline(baseline, started, p["model"], p["prompt_tokens"], p["refresh"], missing=why)
            if keep.keep:
                module.exit_json(**dict(common, verdict="kept", reason=keep.reason))
            if module.check_mode:
                module.exit_json(**dict(common, changed=True, verdict="recorded",
                                        reason="check mode: a baseline would be recorded (%s)" % keep.reason))
            new, result = record(client, p["model"], p["prompt_tokens"], p["groups"], p["timeout"],
                                 p["threshold_floor"])
            if new is None:
                module.exit_json(**dict(common, **result))
            if p["keep_known_good"]:
                known = keep_known_good(baseline, new, p["threshold_floor"])
                if known.keep:
                    # RV(reference) is what was measured; RV(baseline), the known-good one, stays.
                    module.exit_json(**dict(common, **dict(result, verdict="slower", ratio=known.ratio,
                                                           reason=known.reason)))
            directory = os.path.dirname(p["baseline_path"])
            if directory:
                os.makedirs(directory, mode=0o755, exist_ok=True)
            tmp = p["baseline_path"] + ".tmp"
            with open(tmp, "w") as fh:
                fh.write(baseline_to_json(new))
            existed = os.path.exists(p["baseline_path"])
            module.atomic_move(tmp, p["baseline_path"])
            if not existed:
                # A new file gets 0644 whatever the umask; an existing one keeps its mode.
                os.chmod(p["baseline_path"], 0o644)
            module.exit_json(**dict(common, **dict(result, changed=True, verdict="recorded",
                                                   baseline=json.loads(baseline_to_json(new)))))
    except PrefillError as exc:
        module.fail_json(msg=str(exc), **common)


if __name__ == "__main__":
    main()
