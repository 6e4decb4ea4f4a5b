#!/usr/bin/python
# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check the flags a running vLLM server was started with (logic: module_utils/flags/report.py)."""

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
  - Never changes the server or its unit (it writes only its own O(help_cache) entries). Reports mismatches, flags this
    version does not have, and drift between a unit's configured C(ExecStart) and the process it runs.
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
        A string that holds NUL characters is split at them, as C(/proc/PID/cmdline) holds argv.
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
  help_cache:
    description:
      - A directory on the target that keeps the output of C(VLLM_BIN serve --help=all) and
        C(VLLM_BIN --version), so that the slow help command runs once per installed vLLM rather than
        on every call. It is created (mode C(0755)) when missing; each entry is one C(KEY.json) file (mode C(0644)).
      - "The key is a fingerprint of the install, read without running Python: the real path of O(vllm_bin),
        its size and modification time, and the names and modification times of the C(*.dist-info) directories
        under C(lib/python*/site-packages) (or C(dist-packages)) of its environment, two levels above the executable.
        Installing, upgrading or removing any package there changes the key."
      - A missing, unreadable or corrupt entry is a miss, never an error; the commands run and the entry is
        written again. A run whose C(--version) gives no version writes nothing. Check mode reads entries but
        never writes one.
      - Without any C(*.dist-info) directory the install cannot be fingerprinted; the module warns and runs the
        commands on every call.
      - Requires O(vllm_bin).
    type: path
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
seealso:
  - name: vLLM engine arguments
    description: Every flag of C(vllm serve) with its type and default. C(docs/modules.md) in this repository
      says how this module reads them.
    link: https://docs.vllm.ai/en/latest/configuration/engine_args.html
extends_documentation_fragment:
  - action_common_attributes
attributes:
  check_mode:
    support: full
    details: The module only reads, so check mode returns the same result; it only skips writing a
      O(help_cache) entry.
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

- name: Check a unit, reading the help once per installed vLLM
  vllm_flags_info:
    unit: vllm.service
    vllm_bin: /opt/vllm/venv/bin/vllm
    help_cache: /var/cache/vllm-fleet/help
    expect:
      tensor_parallel_size: 2

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
      message: "scheduler_reserve_full_isl: expected true, running false (--no-scheduler-reserve-full-isl on the
        command line)"
unsupported:
  description: Flags this vLLM version does not have, named on the command line, in the boot log, in O(expect) or
    O(forbid).
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
  description: Whether the unit's configured ExecStart differs from the running command line; null when not from
    O(unit).
  returned: always
  type: bool
  sample: false
cmdline:
  description: The running command line, with the values of C(--api-key), C(--hf-token) and C(*TOKEN*=)/C(*KEY*=)
    words masked; null for O(log_path) alone.
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
help_cached:
  description: Whether the flag table and the version came from an O(help_cache) entry instead of running O(vllm_bin).
  returned: always
  type: bool
  sample: true
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.flags.bootlog import parse_boot_log
from ansible.module_utils.flags.cmdline import read_proc_cmdline, split_cmdline
from ansible.module_utils.flags.drift import running_unit
from ansible.module_utils.flags.errors import SourceError, VllmFlagsError
from ansible.module_utils.flags.help import parse_help
from ansible.module_utils.flags.help_cache import HelpCache, entry_text, environment_of, fingerprint
from ansible.module_utils.flags.report import boot_log_warning, flags_report
from ansible.module_utils.host.systemd import show_argv
from ansible.module_utils.shared.versions import version_from_output

ARGUMENT_SPEC = dict(
    cmdline=dict(type="raw"),
    pid=dict(type="int"),
    unit=dict(type="str"),
    vllm_bin=dict(type="str"),
    help_text=dict(type="str"),
    help_cache=dict(type="path"),
    vllm_version=dict(type="str"),
    log_path=dict(type="path"),
    expect=dict(type="dict", default={}),
    forbid=dict(type="list", elements="str", default=[]),
    on_mismatch=dict(type="str", choices=["fail", "warn"], default="fail"),
)
MUTUALLY_EXCLUSIVE = [["cmdline", "pid", "unit"], ["vllm_bin", "help_text"]]
REQUIRED_ONE_OF = [["cmdline", "pid", "unit", "log_path"], ["vllm_bin", "help_text"]]
REQUIRED_BY = {"help_cache": "vllm_bin"}


def _tail(text: str, lines: int = 3) -> str:
    return " | ".join(ln.strip() for ln in (text or "").strip().splitlines()[-lines:])


def find_vllm(module) -> str:
    name = module.params["vllm_bin"]
    if "/" in name:
        if not os.path.exists(name):
            raise SourceError(f"vllm_bin {name} does not exist; point it at the vllm executable "
                              "of the server's environment (e.g. /opt/vllm/venv/bin/vllm)")
        if os.path.isdir(name) or not os.access(name, os.X_OK):
            raise SourceError(f"vllm_bin {name} is not executable; point it at the vllm "
                              "executable of the server's environment")
        return name
    path = module.get_bin_path(name)
    if path is None:
        raise SourceError(f"vllm_bin {name} is not on PATH; give its full path, "
                          "e.g. /opt/vllm/venv/bin/vllm")
    return path


def load_table(module):
    """(the flag table, the installed version (None for help_text), whether the
    help cache answered)."""
    params = module.params
    if params["help_text"] is not None:
        return parse_help(params["help_text"]), None, False
    path = find_vllm(module)
    cache = key = None
    if params["help_cache"] is not None:
        cache, key = HelpCache(params["help_cache"]), fingerprint(path)
        if key is None:
            module.warn(f"help_cache: no *.dist-info directory under {environment_of(path)}/lib/python*/, "
                        f"so a change of the install could not be seen; running `{path} serve --help=all`")
        hit = cache.load(key) if key else None
        if hit is not None:
            return hit.table, hit.version, True

    rc, help_out, err = module.run_command([path, "serve", "--help=all"])
    if rc != 0:
        raise SourceError(f"`{path} serve --help=all` failed (rc={rc}): {_tail(err or help_out)}; "
                          "check that vllm_bin is vLLM's CLI and that its environment imports")
    try:
        table = parse_help(help_out)
    except VllmFlagsError as exc:
        raise SourceError(f"`{path} serve --help=all` printed no flag table: {exc}") from None
    rc, out, err = module.run_command([path, "--version"])
    version = version_from_output(out) if rc == 0 else None
    if version is None:
        module.warn(f"could not read the version from `{path} --version` (rc={rc}): "
                    f"{_tail(err or out, 1)}; set vllm_version")
    elif key and not module.check_mode:
        try:
            cache.save(key, entry_text(path, help_out, out))
        except OSError as exc:
            module.warn(f"help_cache: cannot write {cache.path(key)} ({exc.strerror or exc}); "
                        "the help is read again next time")
    return table, version, False


def read_command_line(module):
    """(the running argv or None, the unit it runs under or None)."""
    params = module.params
    if params["cmdline"] is not None:
        if not isinstance(params["cmdline"], (list, str)):
            raise SourceError("cmdline must be a list of words or a string")
        return split_cmdline(params["cmdline"]), None
    if params["pid"] is not None:
        if params["pid"] <= 0:
            raise SourceError(f"pid must be a positive process id, got {params['pid']}")
        return read_proc_cmdline(params["pid"]), None
    if params["unit"] is not None:
        unit = params["unit"]
        systemctl = module.get_bin_path("systemctl")
        if systemctl is None:
            raise SourceError("systemctl is not on this host's PATH; the unit source needs systemd "
                              "(use pid or cmdline instead)")
        rc, out, err = module.run_command(show_argv(systemctl, unit, ("MainPID", "ExecStart", "LoadState")))
        if rc != 0:
            raise SourceError(f"`systemctl show {unit}` failed (rc={rc}): {_tail(err or out)}")
        info = running_unit(out, unit)
        return read_proc_cmdline(info.main_pid), info
    return None, None


def run(module):
    """Gather the inputs and report on them: (the result, the FlagsReport)."""
    params = module.params
    table, installed, cached = load_table(module)
    argv, unit = read_command_line(module)
    boot = None
    if params["log_path"] is not None:
        boot = parse_boot_log(params["log_path"])
        warning = boot_log_warning(boot, has_cmdline=argv is not None)
        if warning:
            module.warn(warning)
    report = flags_report(table, argv=argv, boot=boot, installed=installed,
                          given_version=params["vllm_version"], unit=unit, unit_name=params["unit"],
                          expect=params["expect"], forbid=params["forbid"])
    return dict(report.result(), help_cached=cached), report


def _summary(problems: list[str]) -> str:
    count = f"{len(problems)} problem" + ("s" if len(problems) != 1 else "")
    listed = "; ".join(f"{n}) {p}" for n, p in enumerate(problems, 1))
    return f"vLLM flags: {count}: {listed}"


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        mutually_exclusive=MUTUALLY_EXCLUSIVE,
        required_one_of=REQUIRED_ONE_OF,
        required_by=REQUIRED_BY,
        supports_check_mode=True,
    )
    try:
        result, report = run(module)
    except VllmFlagsError as exc:
        module.fail_json(msg=str(exc), changed=False)

    if report.bad_input:
        module.fail_json(msg=_summary(report.problems) + " (a flag in expect/forbid that this version "
                         "lacks cannot be checked; fix the names or upgrade vLLM)", **result)
    if report.problems and module.params["on_mismatch"] == "fail":
        module.fail_json(msg=_summary(report.problems) + " (fix the flags in the service definition "
                         "and restart vLLM, or set on_mismatch=warn to report only)", **result)
    for problem in report.problems:
        module.warn(problem)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
