#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check the flags a running vLLM server was started with (logic: module_utils/vllm_flags.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_flags_info
short_description: Check the flags a running vLLM server was started with
description:
  - Reads the command line of a vLLM server (given, from a pid, or from a systemd unit),
    types it against the flag table of the installed vLLM (C(vllm serve --help=all)),
    and compares the effective values with what the operator wants.
  - A flag that is not on the command line has the version's default, as the help shows it.
  - The boot log's C(non-default args) line can add explicit values and the version.
  - Never changes anything. Reports mismatches, flags this version does not have, and drift
    between a unit's configured C(ExecStart) and the process it runs.
  - "Command line forms: C(vllm serve MODEL ...), C([python] /opt/venv/bin/vllm serve ...),
    C(python -m vllm.entrypoints.openai.api_server ...), C(python -m vllm.entrypoints.cli.main serve ...),
    with wrappers such as C(env) or C(bash -c) in front."
  - "Argument forms as vLLM's parser reads them: C(--flag value), C(--flag=value), C(--no-flag),
    short forms (C(-tp 2)), C(--flag_with_underscores), unique prefixes of long flags, JSON values
    (parsed into dicts), dotted JSON keys (C(-cc.mode=3)), the positional model, repeats (the last wins)."
options:
  cmdline:
    description:
      - The server's command line, as a list of words or as one string split like a shell would.
      - It appears in the task's invocation when Ansible logs arguments; prefer O(pid) or O(unit)
        when it holds secrets.
      - Exactly one of O(cmdline), O(pid) and O(unit) may be given. At least one of them or O(log_path) is required.
    type: raw
  pid:
    description:
      - The process id of the vLLM server; its command line is read from C(/proc/PID/cmdline).
    type: int
  unit:
    description:
      - A systemd unit running vLLM. The command line is read from the unit's C(MainPID), and the
        unit's configured C(ExecStart) (from C(systemctl show)) is compared with it (RV(drift)).
    type: str
  vllm_bin:
    description:
      - Path or name of the C(vllm) executable of the server's environment, for example
        C(/opt/vllm/venv/bin/vllm). The module runs C(VLLM_BIN serve --help=all) for the flag
        table and C(VLLM_BIN --version) for the version.
      - Exactly one of O(vllm_bin) and O(help_text) is required.
    type: str
  help_text:
    description:
      - The output of C(vllm serve --help=all) of the installed version, instead of running O(vllm_bin).
      - It carries no version. Give O(vllm_version), or O(log_path) with a version banner, so messages
        can name the version; without either RV(vllm_version) is V(null) and messages say "this vLLM".
    type: str
  vllm_version:
    description:
      - The installed vLLM version, for O(help_text). With O(vllm_bin) it must agree with C(vllm --version).
    type: str
  log_path:
    description:
      - "The server's boot log. The latest C(non-default args: {...}) line adds explicit values
        (the command line wins where both name a flag), and its version banner
        (C(version X), C(vLLM API server version X)) gives the version when nothing else does."
      - When the installed version differs from the log's, that is reported as a mismatch, since the
        server still runs the old build.
    type: path
  expect:
    description:
      - Flags and the values they must have, by dest name (V(tensor_parallel_size)) or any spelling
        of the flag (V(--tensor-parallel-size), V(-tp)).
      - Values are typed from the flag table (bool, int, float, str; C(1k)/C(128K) for human-readable
        integers). A dict value matches when its keys match (a subset); a scalar matches a one-element list.
      - A flag this vLLM version does not have fails the task whatever O(on_mismatch) says,
        because the check cannot be made.
    type: dict
    default: {}
  forbid:
    description:
      - Flags that must not be set explicitly (on the command line or in the boot log's non-default args).
      - A flag this version does not have is satisfied when it is known to the toolkit's version
        history (for example V(watermark) before 0.24.0); an unknown name fails the task.
    type: list
    elements: str
    default: []
  on_mismatch:
    description:
      - What to do when something does not match (mismatches, flags this version does not have,
        drift).
      - V(fail) fails the task with a message listing every problem.
      - V(warn) emits one warning per problem and succeeds.
    type: str
    choices: [fail, warn]
    default: fail
notes:
  - Values read from a C(--config FILE) given to vLLM are not read.
  - The boot log's non-default args show only values that differ from the defaults, and keep
    reprs (a C(KVTransferConfig) object, for example) as strings.
  - C(systemctl show) prints C(ExecStart) unquoted; words with spaces are rejoined when they are JSON,
    and C($VAR) words match any running value.
extends_documentation_fragment:
  - action_common_attributes
attributes:
  check_mode:
    support: full
    details: The module only reads, so check mode returns the same result.
  diff_mode:
    support: none
  platform:
    platforms: posix
author:
  - vllm-fleet contributors
"""

EXAMPLES = r"""
- name: Check the running server's scheduler flags
  vllm_flags_info:
    unit: vllm.service
    vllm_bin: /opt/vllm/venv/bin/vllm
    expect:
      scheduler_reserve_full_isl: true
      tensor_parallel_size: 2
      distributed_executor_backend: ray
    forbid:
      - watermark

- name: Survey a fleet without failing, from a process id
  vllm_flags_info:
    pid: "{{ __vllm_pid }}"
    vllm_bin: vllm
    expect:
      --max-model-len: 128K
    on_mismatch: warn
  register: __vllm_flags

- name: Check a command line against a saved help text and the boot log
  vllm_flags_info:
    cmdline: vllm serve /srv/models/m --tensor-parallel-size 2 --watermark 0.05
    help_text: "{{ lookup('ansible.builtin.file', 'files/vllm-0.32-help-all.txt') }}"
    vllm_version: 0.32.0
    log_path: /var/log/vllm/boot.log
    expect:
      watermark: 0.05
"""

RETURN = r"""
vllm_version:
  description: The installed vLLM version (from C(vllm --version), O(vllm_version) or the boot log); null when unknown.
  returned: always
  type: str
  sample: 0.32.0
effective:
  description:
    - Each flag that is expected, forbidden or set, by dest, with its explicit value or the
      version's default (null when the help shows no default).
  returned: always
  type: dict
  sample: {"scheduler_reserve_full_isl": true, "tensor_parallel_size": 2, "watermark": 0.0}
explicit:
  description: Flags set on the command line or in the boot log's non-default args, by dest; secrets masked.
  returned: always
  type: dict
  sample: {"model": "/srv/models/m", "model_tag": "/srv/models/m", "tensor_parallel_size": 2}
mismatches:
  description: Values that differ from O(expect), flags set that O(forbid) names, and a boot log from another version.
  returned: always
  type: list
  elements: dict
  contains:
    flag:
      description: The dest name (or V(vllm_version)).
      type: str
    expected:
      description: The wanted value, typed; null for a forbidden flag.
      type: raw
    actual:
      description: The running value.
      type: raw
    source:
      description: Where the running value comes from, V(command line), V(boot log) or V(default).
      type: str
    check:
      description: V(expect), V(forbid) or V(version).
      type: str
    message:
      description: The problem in words.
      type: str
  sample:
    - flag: scheduler_reserve_full_isl
      expected: true
      actual: false
      source: command line
      check: expect
      message: "scheduler_reserve_full_isl: expected true, running false (--no-scheduler-reserve-full-isl on the command line)"
unsupported:
  description: Flags this vLLM version does not have, named on the command line, in the boot log, in O(expect) or O(forbid).
  returned: always
  type: list
  elements: dict
  contains:
    flag:
      description: The flag as written.
      type: str
    dest:
      description: Its dest name, when it has one.
      type: str
    source:
      description: V(command line), V(boot log), V(expect) or V(forbid).
      type: str
    added_in:
      description: The first vLLM version with the flag, when the toolkit's history knows it.
      type: str
    message:
      description: The problem in words.
      type: str
  sample:
    - flag: --scheduler-reserve-full-isl
      dest: scheduler_reserve_full_isl
      source: expect
      added_in: 0.19.0
      message: vLLM 0.18.0 has no --scheduler-reserve-full-isl (added in 0.19.0)
drift:
  description: Whether the unit's configured ExecStart differs from the running command line; null when not from O(unit).
  returned: always
  type: bool
  sample: false
cmdline:
  description: The running command line, with the values of C(--api-key), C(--hf-token) and C(*TOKEN*=)/C(*KEY*=) words masked; null for O(log_path) alone.
  returned: always
  type: list
  elements: str
  sample: ["/opt/vllm/venv/bin/python", "/opt/vllm/venv/bin/vllm", "serve", "/srv/models/m", "--api-key", "********"]
unit_cmdline:
  description: The unit's configured ExecStart words, masked; null when not from O(unit).
  returned: always
  type: list
  elements: str
  sample: ["/opt/vllm/venv/bin/vllm", "serve", "/srv/models/m", "-tp", "2"]
problems:
  description: Every problem found, in words, as the failure message or the warnings list them.
  returned: always
  type: list
  elements: str
  sample: ["watermark: must not be set, running 0.15 (--watermark 0.15 on the command line)"]
changed:
  description: Always false; the module only reads.
  returned: always
  type: bool
  sample: false
"""

import os
from dataclasses import asdict

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.vllm_flags import (
    SOURCE_CMDLINE,
    SOURCE_LOG,
    SourceError,
    VllmFlagsError,
    check,
    combine_settings,
    compare_unit,
    drift_message,
    log_settings,
    mask_argv,
    parse_boot_log,
    parse_cmdline,
    parse_help,
    parse_systemctl_show,
    read_proc_cmdline,
    split_cmdline,
    split_exec_argv,
    version_from_output,
    version_mismatch,
    version_tuple,
)

ARGUMENT_SPEC = dict(
    cmdline=dict(type="raw"),
    pid=dict(type="int"),
    unit=dict(type="str"),
    vllm_bin=dict(type="str"),
    help_text=dict(type="str"),
    vllm_version=dict(type="str"),
    log_path=dict(type="path"),
    expect=dict(type="dict", default={}),
    forbid=dict(type="list", elements="str", default=[]),
    on_mismatch=dict(type="str", choices=["fail", "warn"], default="fail"),
)
MUTUALLY_EXCLUSIVE = [["cmdline", "pid", "unit"], ["vllm_bin", "help_text"]]
REQUIRED_ONE_OF = [["cmdline", "pid", "unit", "log_path"], ["vllm_bin", "help_text"]]


def _tail(text: str, lines: int = 3) -> str:
    return " | ".join(ln.strip() for ln in (text or "").strip().splitlines()[-lines:])


def load_table(module):
    """The flag table and the version it comes with (None for help_text)."""
    params = module.params
    if params["help_text"] is not None:
        return parse_help(params["help_text"]), None
    name = params["vllm_bin"]
    if "/" in name:
        path = name
        if not os.path.exists(path):
            raise SourceError(f"vllm_bin {path} does not exist; point it at the vllm executable "
                              "of the server's environment (e.g. /opt/vllm/venv/bin/vllm)")
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            raise SourceError(f"vllm_bin {path} is not executable; point it at the vllm "
                              "executable of the server's environment")
    else:
        path = module.get_bin_path(name)
        if path is None:
            raise SourceError(f"vllm_bin {name} is not on PATH; give its full path, "
                              "e.g. /opt/vllm/venv/bin/vllm")
    rc, out, err = module.run_command([path, "serve", "--help=all"])
    if rc != 0:
        raise SourceError(f"`{path} serve --help=all` failed (rc={rc}): {_tail(err or out)}; "
                          "check that vllm_bin is vLLM's CLI and that its environment imports")
    try:
        table = parse_help(out)
    except VllmFlagsError as exc:
        raise SourceError(f"`{path} serve --help=all` printed no flag table: {exc}") from None
    rc, out, err = module.run_command([path, "--version"])
    version = version_from_output(out) if rc == 0 else None
    if version is None:
        module.warn(f"could not read the version from `{path} --version` (rc={rc}): "
                    f"{_tail(err or out, 1)}; set vllm_version")
    return table, version


def read_unit(module, unit: str):
    systemctl = module.get_bin_path("systemctl")
    if systemctl is None:
        raise SourceError("systemctl is not on this host's PATH; the unit source needs systemd "
                          "(use pid or cmdline instead)")
    rc, out, err = module.run_command(
        [systemctl, "show", "-p", "MainPID", "-p", "ExecStart", "-p", "LoadState", unit])
    if rc != 0:
        raise SourceError(f"`systemctl show {unit}` failed (rc={rc}): {_tail(err or out)}")
    info = parse_systemctl_show(out, unit)
    if info.main_pid <= 0:
        raise SourceError(f"unit {unit} has no running main process (MainPID={info.main_pid}); "
                          f"start it, or see `systemctl status {unit}`")
    return info, read_proc_cmdline(info.main_pid)


def resolve_version(module, installed, logged):
    given = module.params["vllm_version"]
    if given is not None:
        try:
            version_tuple(given)
        except ValueError:
            raise SourceError(f"vllm_version {given!r} is not a version like 0.32.0") from None
        if installed and version_tuple(installed) != version_tuple(given):
            raise SourceError(f"vllm_version {given} contradicts `vllm --version` ({installed}); "
                              "drop vllm_version when vllm_bin is given")
        return installed or given
    return installed or logged


def run(module) -> tuple[dict, list[str], list[str]]:
    params = module.params
    table, installed = load_table(module)

    argv = None
    unit_info = None
    if params["cmdline"] is not None:
        if not isinstance(params["cmdline"], (list, str)):
            raise SourceError("cmdline must be a list of words or a string")
        argv = split_cmdline(params["cmdline"])
    elif params["pid"] is not None:
        if params["pid"] <= 0:
            raise SourceError(f"pid must be a positive process id, got {params['pid']}")
        argv = read_proc_cmdline(params["pid"])
    elif params["unit"] is not None:
        unit_info, argv = read_unit(module, params["unit"])

    boot = None
    if params["log_path"] is not None:
        boot = parse_boot_log(params["log_path"])
        if boot.args is None:
            hint = (f"log_path {params['log_path']} has no `non-default args:` line (vLLM 0.9 and "
                    "later log it at start-up)")
            if argv is None:
                raise SourceError(hint + "; check the path, or give cmdline, pid or unit")
            module.warn(hint + "; using the command line alone")

    version = resolve_version(module, installed, boot.version if boot else None)

    parsed = None
    if argv is not None:
        try:
            parsed = parse_cmdline(argv, table)
        except VllmFlagsError as exc:
            if unit_info is not None:
                raise SourceError(f"{exc}; MainPID {unit_info.main_pid} of unit {params['unit']} may "
                                  "be a wrapper: give the vLLM process as pid") from None
            raise
    cmd_settings = parsed.settings if parsed else {}
    unknown = list(parsed.unknown) if parsed else []
    logged, log_unknown = log_settings(boot, table) if boot else ({}, [])
    unknown += log_unknown

    report = check(table, version, combine_settings(cmd_settings, logged), unknown,
                   params["expect"], params["forbid"],
                   context=SOURCE_CMDLINE if parsed else SOURCE_LOG + "'s non-default args")
    problems = report.problems
    mismatches = [asdict(m) for m in report.mismatches]
    stale = version_mismatch(installed or params["vllm_version"], boot.version if boot else None)
    if stale is not None:
        mismatches.append(asdict(stale))
        problems.append(stale.message)

    drift = None
    unit_cmdline = None
    if unit_info is not None:
        result = compare_unit(parsed, unit_info, table)
        drift = result.drifted
        unit_cmdline = mask_argv(split_exec_argv(unit_info.exec_argv or ""), table)
        if drift:
            problems.append(drift_message(result))

    out = dict(
        changed=False,
        vllm_version=version,
        effective=report.effective,
        explicit=report.explicit,
        mismatches=mismatches,
        unsupported=[asdict(u) for u in report.unsupported],
        drift=drift,
        cmdline=mask_argv(argv, table) if argv is not None else None,
        unit_cmdline=unit_cmdline,
        problems=problems,
    )
    return out, problems, report.bad_input


def _summary(problems: list[str]) -> str:
    count = f"{len(problems)} problem" + ("s" if len(problems) != 1 else "")
    listed = "; ".join(f"{n}) {p}" for n, p in enumerate(problems, 1))
    return f"vLLM flags: {count}: {listed}"


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        mutually_exclusive=MUTUALLY_EXCLUSIVE,
        required_one_of=REQUIRED_ONE_OF,
        supports_check_mode=True,
    )
    try:
        result, problems, bad_input = run(module)
    except VllmFlagsError as exc:
        module.fail_json(msg=str(exc), changed=False)

    if bad_input:
        module.fail_json(msg=_summary(problems) + " (a flag in expect/forbid that this version "
                         "lacks cannot be checked; fix the names or upgrade vLLM)", **result)
    if problems and module.params["on_mismatch"] == "fail":
        module.fail_json(msg=_summary(problems) + " (fix the flags in the service definition "
                         "and restart vLLM, or set on_mismatch=warn to report only)", **result)
    for problem in problems:
        module.warn(problem)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
