#!/usr/bin/python
# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_kv_cache_info
short_description: Report the KV cache pool a vLLM engine allocated at startup
description:
  - Reads vLLM startup output (a log file, text, or a systemd unit's journal for its current run)
    and reports the KV cache pool of the engine from the capacity lines vLLM prints once it has
    allocated the cache.
  - >-
    Understands every format from v0.4 to v0.33.
    The V0 block lines C(# GPU blocks: N, # CPU blocks: M) and C(# cuda blocks: N, ...).
    The V1 lines C(GPU KV cache size: N tokens) and C(Maximum concurrency for M tokens per request: X.XXx),
    separate up to v0.27.
    The combined line from v0.28, whose first word is the device (C(GPU), C(CPU), C(XPU), C(GPU + host)) from v0.30.
  - >-
    Each line counts only where vLLM prints it: at the start of the message after vLLM's log prefix
    (level, C(MM-DD HH:MM:SS) or the C(...) a paste elides it to, C([file.py:N])),
    logged by the file that prints that line (C(kv_cache_utils.py) or a V0 executor for the capacity lines,
    a worker for the memory line, the API server's entrypoints for the banner and C(non-default args)).
    Before vLLM's prefix may stand what log collectors add: ANSI colour, journald and syslog stamps,
    docker and kubelet timestamps, docker compose and kubectl names, vLLM's and Ray's process labels (nested),
    quote bars and k9s boxes. A line that starts with other text is not vLLM's.
    An excerpt pasted without vLLM's prefixes is read from the start of each line,
    until a line with vLLM's prefix shows the log has them.
    A line that Ray forwarded from a worker (C((RayWorkerProc pid=N))) can carry another line glued to its end,
    when the engine logs while Ray prints; it is read as two lines where a process label and vLLM's prefix follow.
    Only a Ray worker's line is cut so: a worker never logs a request's text.
  - >-
    When a source holds several boots, only the latest is reported.
    Boots start at the API-server banner, C(non-default args), C(args: Namespace() or C(Initializing a V1 LLM engine).
    A repeated once-per-engine line (V0 block line, v0.28+ combined line) also starts a new boot.
  - Several lines from one engine (one per worker in v0.8 to v0.11) give the minimum,
    which is what the engine runs with.
    Data-parallel engines (C(EngineCore_DP0), C(EngineCore_DP1), ...) each keep their own pool in RV(per_engine),
    and the top-level values are those of the engine with the smallest pool.
  - >-
    Look-alikes never match: C(GPU KV cache usage: 0.0%), prose, tqdm residue glued onto numbers,
    and capacity lines or version banners quoted inside a logged prompt (C(--enable-log-requests)),
    so whoever can send a prompt can neither change the reported pool nor start a new boot.
  - >-
    A value that cannot be read (non-ASCII digits, a figure longer than any vLLM prints) is returned as null,
    never guessed. Any input, however long, malformed or binary, gives a result or a failure message,
    never a traceback, in time linear in its size.
  - On a multi-node deployment only the node that runs the engine core (the head node, rank 0) prints the line.
    When the line is missing the failure says whether the log looks like a worker node's,
    a failed start, or Ray still waiting.
  - The source is streamed in constant memory; see docs/benchmarks.md for the speed against C(grep).
author:
  - vllm-fleet contributors
options:
  path:
    description:
      - A vLLM log file on the target host.
      - Exactly one of O(path), O(content) and O(unit) is required.
    type: path
  content:
    description:
      - vLLM output as text, for example a registered command's C(stdout).
    type: str
  unit:
    description:
      - A systemd unit that runs vLLM. Its journal is read for the unit's current run only
        (C(journalctl -u UNIT _SYSTEMD_INVOCATION_ID=<InvocationID>)), so earlier runs never count.
      - Needs C(systemctl) and C(journalctl) on the target and read access to the journal.
    type: str
  context_tokens:
    description:
      - The full context one session needs, in tokens (usually the served C(max_model_len)).
      - When given, RV(full_context_sessions) is floor(RV(kv_cache_tokens) / O(context_tokens)).
        Otherwise it is floor(RV(max_concurrency)), that is, sessions of vLLM's own max_model_len.
      - Must be a positive integer.
    type: int
  min_sessions:
    description:
      - Fail when fewer than this many full-context sessions fit in the pool.
      - Checked only when a capacity line was found. Must be a positive integer.
    type: int
  required:
    description:
      - Fail when the latest boot has no capacity line.
      - With V(false), a missing line gives success with RV(found=false) and null values.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    description: Only reads; the result in check mode is the same as in a normal run.
  diff_mode:
    support: none
    description: Reports no diff; nothing is changed.
  platform:
    platforms: posix
    description: O(unit) needs systemd on the target.
notes:
  - The token figure is the pool of one engine (one data-parallel replica), shared by its tensor-parallel ranks.
    Do not multiply it by the tensor-parallel size or the node count.
  - Before v0.30, V1 prints C(GPU KV cache size) even on the CPU backend, so RV(device) is the word vLLM printed.
  - For hybrid models before v0.20.1 the token figure and the concurrency ratio disagree (vLLM issue 40694);
    the module warns when floor(tokens / context) and floor(ratio) differ for the same context.
  - vLLM's own log format is what the module reads. A custom logging config (C(VLLM_LOGGING_CONFIG_PATH)) or a
    C(VLLM_LOGGING_PREFIX) of another shape makes the lines unreadable (RV(found=false)), never misread.
seealso:
  - name: vLLM parallelism and scaling
    description: How tensor- and pipeline-parallel ranks share one engine's KV cache pool. C(docs/modules.md)
      in this repository lists the KV cache log lines each vLLM version prints and how this module reads them.
    link: https://docs.vllm.ai/en/latest/serving/parallelism_scaling.html
"""

EXAMPLES = r"""
- name: Read the KV cache pool of the current run of vllm.service
  vllm_kv_cache_info:
    unit: vllm.service
    context_tokens: 1048576
    min_sessions: 2
  register: __vllm_kv

- name: Show how many full-context sessions fit
  ansible.builtin.debug:
    msg: "{{ __vllm_kv.full_context_sessions }} sessions of 1M tokens ({{ __vllm_kv.kv_cache_tokens }} tokens)"

- name: Read a log file on the head node, tolerating a missing line
  vllm_kv_cache_info:
    path: /var/log/vllm/serve.log
    required: false
  register: __vllm_kv_file

- name: Read output captured by an earlier task
  vllm_kv_cache_info:
    content: "{{ __vllm_boot.stdout }}"
"""

RETURN = r"""
found:
  description: Whether the latest boot has a KV cache capacity line.
  returned: always
  type: bool
  sample: true
kv_cache_tokens:
  description:
    - "The pool of one engine, in tokens (C(KV cache size: N tokens));
      null for the V0 block lines, which give no token figure."
    - With several data-parallel engines, the smallest engine's pool.
  returned: always
  type: int
  sample: 2420352
max_concurrency:
  description: "X from C(Maximum concurrency for M tokens per request: X.XXx); the minimum over the engine's lines."
  returned: always
  type: float
  sample: 2.31
concurrency_tokens:
  description: M from the same line, the tokens per request vLLM used (its max_model_len).
  returned: always
  type: int
  sample: 1048576
device:
  description: The device word vLLM printed (C(GPU), C(CPU), C(XPU), C(GPU + host), C(cuda), ...).
  returned: always
  type: str
  sample: GPU
gpu_blocks:
  description: Device-pool block count from the V0 and V1-before-0.8 block lines (C(# GPU blocks), C(# cuda blocks)).
  returned: always
  type: int
  sample: 7191
cpu_blocks:
  description: C(# CPU blocks) from the V0 block lines (swap space; for the V0 CPU backend, the pool itself).
  returned: always
  type: int
  sample: 512
available_kv_cache_memory_gib:
  description:
    - "Per-worker KV cache memory in GiB: C(Available KV cache memory: X GiB),
      or on the CPU backend X in 'Explicitly set (X/Y) GiB for KV cache'."
    - The minimum over the boot's workers.
  returned: always
  type: float
  sample: 6.51
engines:
  description: Number of engines (data-parallel replicas) that printed a capacity line.
  returned: always
  type: int
  sample: 1
per_engine:
  description: One entry per engine, with its own values.
  returned: always
  type: list
  elements: dict
  contains:
    label:
      description: The engine's process label (C(EngineCore_DP0), C(EngineCore)), or C(engine) when lines carry none.
      type: str
    kv_cache_tokens:
      description: The engine's pool in tokens.
      type: int
    max_concurrency:
      description: The engine's concurrency ratio.
      type: float
    concurrency_tokens:
      description: Tokens per request of that ratio.
      type: int
    device:
      description: Device word.
      type: str
    gpu_blocks:
      description: Device-pool blocks (V0 lines).
      type: int
    cpu_blocks:
      description: CPU blocks (V0 lines).
      type: int
    available_kv_cache_memory_gib:
      description: KV cache memory per worker of this engine.
      type: float
    capacity_lines:
      description: How many capacity and concurrency lines this engine printed (several in v0.8 to v0.11 TP).
      type: int
  sample:
    - label: EngineCore
      kv_cache_tokens: 2420352
      max_concurrency: 2.31
      concurrency_tokens: 1048576
      device: GPU
      gpu_blocks: null
      cpu_blocks: null
      available_kv_cache_memory_gib: 22.5
      capacity_lines: 1
vllm_version:
  description: vLLM version from the latest boot's banner or engine init line, null when the log shows none.
  returned: always
  type: str
  sample: "0.32.0"
full_context_sessions:
  description:
    - Whole sessions that fit. floor(kv_cache_tokens / context_tokens) when O(context_tokens) is given,
      else floor(max_concurrency). Null when the log does not give what that needs.
  returned: always
  type: int
  sample: 2
evidence:
  description: The matched lines of the latest boot (the last 16), ANSI codes stripped.
  returned: always
  type: list
  elements: str
  sample:
    - "(EngineCore pid=43) INFO 05-06 06:17:45 [kv_cache_utils.py:1710] GPU KV cache size: 2,420,352 tokens"
source:
  description: What was read.
  returned: always
  type: str
  sample: "journal of vllm.service, invocation 3f1c0e8d2a6b4b1f9e0d5c7a8b9f0e1d"
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host.systemd import parse_show, show_argv
from ansible.module_utils.kv.errors import CapacityNotFoundError, KvCacheError, OptionError, SourceError
from ansible.module_utils.kv.not_found import gather_hints, not_found_message
from ansible.module_utils.kv.scanner import scan_chunks
from ansible.module_utils.kv.sessions import check_options, check_sessions, figures_disagree
from ansible.module_utils.kv.sources import command_chunks, file_chunks, text_chunks, unit_invocation

ARGUMENT_SPEC = dict(
    path=dict(type="path"),
    content=dict(type="str"),
    unit=dict(type="str"),
    context_tokens=dict(type="int"),
    min_sessions=dict(type="int"),
    required=dict(type="bool", default=True),
)
SOURCES = ("path", "content", "unit")


def _unit_source(module, unit):
    """Return (description, chunks(offset)) for the unit's current run."""
    bins = {}
    for name in ("systemctl", "journalctl"):
        bins[name] = module.get_bin_path(name)
        if not bins[name]:
            raise SourceError(
                "%s not found on the target: unit= needs systemd's tools there; read a log "
                "file with path= instead." % name)
    rc, out, err = module.run_command(
        show_argv(bins["systemctl"], unit, ("LoadState", "ActiveState", "InvocationID"), end_of_options=True))
    if rc != 0:
        raise SourceError(
            "systemctl show %s failed (exit %d): %s. unit= needs a target whose services systemd runs; "
            "otherwise read the log with path=." % (unit, rc, (err or out).strip()))
    invocation = unit_invocation(unit, parse_show(out))
    argv = [bins["journalctl"], "-u", unit, "-o", "cat", "--no-pager", "--quiet",
            "_SYSTEMD_INVOCATION_ID=%s" % invocation]
    what = "journalctl -u %s (invocation %s)" % (unit, invocation)
    return ("journal of %s, invocation %s" % (unit, invocation),
            lambda offset=0: command_chunks(argv, what, offset))


def _source(module):
    params = module.params
    if params["path"] is not None:
        path = params["path"]
        return path, lambda offset=0: file_chunks(path, offset)
    if params["content"] is not None:
        content = params["content"]
        return "content", lambda offset=0: text_chunks(content, offset)
    return _unit_source(module, params["unit"])


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        mutually_exclusive=[SOURCES],
        required_one_of=[SOURCES],
        supports_check_mode=True,
    )
    params = module.params
    try:
        check_options(params["context_tokens"], params["min_sessions"])
    except OptionError as e:
        module.fail_json(msg=str(e), changed=False)
    context_tokens = params["context_tokens"]

    description = params["unit"] and "unit %s" % params["unit"] or params["path"] or "content"
    result = dict(changed=False, source=description)
    try:
        description, chunks = _source(module)
        result["source"] = description
        report = scan_chunks(chunks(), description)
        result.update(report.as_result(context_tokens))
        if not report.found and params["required"]:
            diagnosis = gather_hints(chunks(report.boot_offset))
            raise CapacityNotFoundError(not_found_message(report, diagnosis, description))
        warning = figures_disagree(report, context_tokens)
        if warning:
            module.warn(warning)
        check_sessions(report, context_tokens, params["min_sessions"])
    except KvCacheError as e:
        module.fail_json(msg=str(e), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
