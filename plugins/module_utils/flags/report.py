# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The report of ``vllm_flags_info``, from the inputs the module gathered.

The module reads the flag table and the installed version (``vllm_bin`` or
``help_text``), the command line (given, ``/proc`` or the unit) and the boot
log; :func:`flags_report` decides the rest:

* which version applies (the installed one, else ``vllm_version``, else the
  boot log's), and whether a given ``vllm_version`` is valid;
* the command line wins over the boot log for a flag both name;
* a boot log from another version than the installed one is a mismatch;
* a unit's ExecStart that differs from its running process is drift.

It returns a :class:`FlagsReport`: the module's result, its problems, and the
``bad_input`` that fails the task whatever ``on_mismatch`` says.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ansible.module_utils.flags.bootlog import BootLog, log_settings
from ansible.module_utils.flags.check import Report, check, version_mismatch
from ansible.module_utils.flags.cmdline import parse_cmdline
from ansible.module_utils.flags.drift import compare_unit, drift_message, split_exec_argv
from ansible.module_utils.flags.errors import SourceError, VllmFlagsError
from ansible.module_utils.flags.help import FlagTable
from ansible.module_utils.flags.secrets_mask import mask_argv
from ansible.module_utils.flags.settings import SOURCE_CMDLINE, SOURCE_LOG, Setting
from ansible.module_utils.host.systemd import UnitInfo
from ansible.module_utils.shared.numeric import shown
from ansible.module_utils.shared.versions import release_tuple


@dataclass
class FlagsReport(Report):
    """The check's report (a boot log from another version among its
    mismatches), with the command lines and the unit's drift."""

    cmdline: list[str] | None = None
    unit_cmdline: list[str] | None = None
    drift: bool | None = None
    drift_problem: str | None = None

    @property
    def problems(self) -> list[str]:
        return super().problems + ([self.drift_problem] if self.drift_problem else [])

    def result(self) -> dict[str, Any]:
        """The module's return values (``changed`` included)."""
        return dict(
            changed=False,
            vllm_version=self.vllm_version,
            effective=self.effective,
            explicit=self.explicit,
            mismatches=[asdict(m) for m in self.mismatches],
            unsupported=[asdict(u) for u in self.unsupported],
            drift=self.drift,
            cmdline=self.cmdline,
            unit_cmdline=self.unit_cmdline,
            problems=self.problems,
        )


def boot_log_warning(boot: BootLog, has_cmdline: bool) -> str | None:
    """A boot log without a ``non-default args`` line: SourceError when it is
    the only source, else the warning to give (None when it has one)."""
    if boot.args is not None:
        return None
    hint = (f"log_path {boot.path} has no `non-default args:` line (vLLM 0.9 and "
            "later log it at start-up)")
    if not has_cmdline:
        raise SourceError(hint + "; check the path, or give cmdline, pid or unit")
    return hint + "; using the command line alone"


def resolve_version(installed: str | None, given: str | None, logged: str | None) -> str | None:
    """The version messages name: ``vllm --version``, else ``vllm_version``,
    else the boot log's. SourceError when ``given`` is no version or
    contradicts ``installed``."""
    if given is not None:
        try:
            release_tuple(given)
        except ValueError:
            raise SourceError(f"vllm_version {shown(given)} is not a version like 0.32.0") from None
        if installed and release_tuple(installed) != release_tuple(given):
            raise SourceError(f"vllm_version {given} contradicts `vllm --version` ({installed}); "
                              "drop vllm_version when vllm_bin is given")
        return installed or given
    return installed or logged


def combine_settings(cmd: dict[str, Setting] | None, log: dict[str, Setting] | None
                     ) -> dict[str, Setting]:
    """The command line wins over the boot log for a flag both name."""
    merged = dict(log or {})
    merged.update(cmd or {})
    return merged


def flags_report(table: FlagTable, *, argv: list[str] | None = None, boot: BootLog | None = None,
                 installed: str | None = None, given_version: str | None = None,
                 unit: UnitInfo | None = None, unit_name: str | None = None,
                 expect: dict[str, Any] | None = None, forbid: list[str] | None = None
                 ) -> FlagsReport:
    """Check the gathered inputs against ``expect`` and ``forbid``.

    ``argv`` is the running command line (None for a boot log alone), ``unit``
    the unit it was read from (``unit_name`` names it in messages),
    ``installed`` what ``vllm --version`` printed and ``given_version`` the
    ``vllm_version`` option. Raises a VllmFlagsError for input that cannot be
    checked.
    """
    logged = boot.version if boot else None
    version = resolve_version(installed, given_version, logged)

    parsed = None
    if argv is not None:
        try:
            parsed = parse_cmdline(argv, table)
        except VllmFlagsError as exc:
            if unit is not None:
                raise SourceError(f"{exc}; MainPID {unit.main_pid} of unit {unit_name} may "
                                  "be a wrapper: give the vLLM process as pid") from None
            raise
    cmd_settings = parsed.settings if parsed else {}
    unknown = list(parsed.unknown) if parsed else []
    log_values, log_unknown = log_settings(boot, table) if boot else ({}, [])
    unknown += log_unknown

    report = check(table, version, combine_settings(cmd_settings, log_values), unknown,
                   expect, forbid,
                   context=SOURCE_CMDLINE if parsed else SOURCE_LOG + "'s non-default args")
    stale = version_mismatch(installed or given_version, logged)

    drift = drift_problem = unit_cmdline = None
    if unit is not None:
        result = compare_unit(parsed, unit, table)
        drift = result.drifted
        drift_problem = drift_message(result) if drift else None
        unit_cmdline = mask_argv(split_exec_argv(unit.exec_argv or ""), table)

    return FlagsReport(
        vllm_version=version,
        explicit=report.explicit,
        effective=report.effective,
        mismatches=report.mismatches + ([stale] if stale else []),
        unsupported=report.unsupported,
        cmdline=mask_argv(argv, table) if argv is not None else None,
        unit_cmdline=unit_cmdline,
        drift=drift,
        drift_problem=drift_problem,
    )
