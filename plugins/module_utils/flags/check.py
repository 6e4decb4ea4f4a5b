# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Comparing what a server runs with against ``expect`` and ``forbid``.

:func:`check` types each wanted value from the flag table, looks it up in the
explicit settings or the version's default, and reports every
:class:`Mismatch` and every flag this version lacks (:class:`Unsupported`).
:func:`version_mismatch` finds a server still running an older build.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ansible.module_utils.flags.errors import ExpectError
from ansible.module_utils.flags.help import Flag, FlagTable
from ansible.module_utils.flags.history import FLAG_HISTORY, missing_flag_message
from ansible.module_utils.flags.settings import SOURCE_CMDLINE, SOURCE_DEFAULT, SOURCE_LOG, Setting, Unknown
from ansible.module_utils.flags.values import format_value, maybe_json, to_bool, to_float, to_int
from ansible.module_utils.shared.versions import release_tuple


@dataclass
class Mismatch:
    flag: str
    expected: Any
    actual: Any
    source: str
    check: str            # expect | forbid | version
    message: str


@dataclass
class Unsupported:
    flag: str
    dest: str | None
    source: str           # command line | boot log | expect | forbid
    added_in: str | None
    message: str


@dataclass
class Report:
    vllm_version: str | None
    explicit: dict[str, Any]
    effective: dict[str, Any]
    mismatches: list[Mismatch]
    unsupported: list[Unsupported]

    @property
    def problems(self) -> list[str]:
        return [u.message for u in self.unsupported] + [m.message for m in self.mismatches]

    @property
    def bad_input(self) -> list[str]:
        """Flags in expect/forbid this version lacks: the check cannot be made."""
        return [u.message for u in self.unsupported if u.source in ("expect", "forbid")]


def coerce_expected(flag: Flag, value: Any, where: str) -> Any:
    """Type an ``expect`` value from the flag table (bool/int/float/str)."""
    if value is None:
        return None
    kind = flag.kind
    try:
        if kind == "bool":
            return to_bool(value)
        if kind == "int":
            if flag.choices and str(value) not in flag.choices:
                raise ExpectError(
                    f"{where}: {format_value(value)} is not one of {', '.join(flag.choices)}")
            return to_int(value, flag.human_int)
        if kind == "float":
            return to_float(value)
        if kind == "str" and not isinstance(value, (dict, list)):
            text = format_value(value) if isinstance(value, bool) else str(value)
            if flag.choices and text not in flag.choices:
                raise ExpectError(
                    f"{where}: {text!r} is not one of {', '.join(flag.choices)} "
                    f"(the choices of {flag.option})")
            return text
        if kind == "json" and isinstance(value, str):
            return maybe_json(value, "{[")
    except ValueError:
        raise ExpectError(
            f"{where}: {value!r} is not a {kind} value, as {flag.option} needs "
            f"(its default is {format_value(flag.default)})") from None
    return value


def _coerce_like(actual: Any, expected: Any) -> Any:
    """Type an untyped actual (a string from the command line) like expected."""
    if not isinstance(actual, str) or isinstance(expected, str) or expected is None:
        return actual
    try:
        if isinstance(expected, bool):
            return to_bool(actual)
        if isinstance(expected, int):
            return to_int(actual, human=True)
        if isinstance(expected, float):
            return to_float(actual)
        if isinstance(expected, (dict, list)):
            return maybe_json(actual, "{[")
    except ValueError:
        return actual
    return actual


def values_equal(expected: Any, actual: Any) -> bool:
    """Equal after typing; a dict expected is a subset match, a scalar matches a
    one-element list."""
    actual = _coerce_like(actual, expected)
    if isinstance(expected, bool) or isinstance(actual, bool):
        return isinstance(expected, bool) and isinstance(actual, bool) and expected is actual
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        # int and float compare exactly in Python, with no overflow for a huge int.
        return expected == actual
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            k in actual and values_equal(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, (list, tuple)):
        return isinstance(actual, (list, tuple)) and len(actual) == len(expected) and all(
            values_equal(e, a) for e, a in zip(expected, actual))
    if isinstance(actual, (list, tuple)) and len(actual) == 1:
        return values_equal(expected, actual[0])
    if isinstance(expected, str) and not isinstance(actual, str) and actual is not None:
        return expected == format_value(actual)
    return expected == actual


def _resolve_request(table: FlagTable, name: str, where: str) -> tuple[Flag | None, str, str]:
    """(flag, dest, option spelling) for an expect/forbid key."""
    flag, negative = table.resolve(name)
    if flag is not None and negative:
        raise ExpectError(
            f"{where}: {name} is the negative form; name {flag.dest} and expect false instead")
    if flag is not None:
        return flag, flag.dest, flag.option
    raw = str(name).strip()
    dest = raw.lstrip("-").replace("-", "_")
    hist = FLAG_HISTORY.get(dest)
    option = hist.option if hist else (raw if raw.startswith("-") else "--" + raw.replace("_", "-"))
    return None, dest, option


def _unknown_problem(item: Unknown, version: str | None, who: str) -> Unsupported:
    """What a word the flag table cannot account for means, in words."""
    dest = item.flag.lstrip("-").replace("-", "_")
    hist = FLAG_HISTORY.get(dest)
    where = "the command line" if item.source == SOURCE_CMDLINE else "the boot log"
    if item.reason == "unknown":
        msg = (f"{missing_flag_message(item.flag, dest, version)}, but {where} sets it: "
               f"{item.evidence}")
    elif item.reason == "positional":
        msg = f"unexpected argument {item.evidence!r} on {where} ({who} takes one model)"
    elif item.reason == "ambiguous":
        msg = f"{item.flag} on {where} is ambiguous for {who}; spell the flag out"
    else:
        msg = f"{item.flag} on {where}: {item.reason} ({item.evidence})"
    return Unsupported(item.flag, dest if item.reason == "unknown" else None,
                       item.source, hist.added_in if hist else None, msg)


def _wanted(table: FlagTable, version: str | None, expect: dict[str, Any], seen: dict[str, str],
            unsupported: list[Unsupported]) -> list[tuple[Flag, Any, str]]:
    """``expect``'s flags with their values typed; a flag this version lacks goes to ``unsupported``."""
    wanted: list[tuple[Flag, Any, str]] = []
    for name, value in expect.items():
        flag, dest, option = _resolve_request(table, name, f"expect.{name}")
        if dest in seen:
            raise ExpectError(f"expect names {dest} twice ({seen[dest]} and {name}); keep one")
        seen[dest] = str(name)
        if flag is None:
            hist = FLAG_HISTORY.get(dest)
            unsupported.append(Unsupported(option, dest, "expect", hist.added_in if hist else None,
                                           missing_flag_message(option, dest, version)
                                           + ("" if hist else "; check the name in expect")))
            continue
        wanted.append((flag, coerce_expected(flag, value, f"expect.{name}"), str(name)))
    return wanted


def _forbidden(table: FlagTable, version: str | None, forbid: list[str], seen: dict[str, str],
               unsupported: list[Unsupported]) -> list[Flag]:
    """``forbid``'s flags; a name no version has goes to ``unsupported``."""
    forbidden: list[Flag] = []
    for name in forbid:
        flag, dest, option = _resolve_request(table, name, f"forbid {name}")
        if dest in seen:
            raise ExpectError(f"{dest} is both in expect and in forbid; keep one")
        seen[dest] = str(name)
        if flag is None:
            if dest in FLAG_HISTORY:
                continue            # this version cannot have it set
            unsupported.append(Unsupported(option, dest, "forbid", None,
                                           missing_flag_message(option, dest, version)
                                           + "; check the name in forbid"))
            continue
        forbidden.append(flag)
    return forbidden


def _set_by(setting: Setting) -> str:
    """The words that set ``setting``, and where."""
    return f"{setting.evidence} on the command line" if setting.source == SOURCE_CMDLINE else setting.evidence


def _expect_mismatch(flag: Flag, expected: Any, settings: dict[str, Setting], version: str | None,
                     context: str) -> Mismatch | None:
    setting = settings.get(flag.dest)
    if setting is not None:
        actual, source, why = setting.value, setting.source, _set_by(setting)
    else:
        actual = flag.default if flag.default_known else None
        source = SOURCE_DEFAULT
        if not flag.default_known:
            default = "the help shows no default"
        else:
            default = f"the vLLM {version} default" if version else "the default"
        why = f"{default}; {flag.option} is not set on the {context}"
    if values_equal(expected, actual):
        return None
    return Mismatch(flag.dest, expected, actual, source, "expect",
                    f"{flag.dest}: expected {format_value(expected)}, running {format_value(actual)} ({why})")


def check(table: FlagTable, version: str | None, settings: dict[str, Setting],
          unknown: list[Unknown], expect: dict[str, Any] | None, forbid: list[str] | None,
          context: str = SOURCE_CMDLINE) -> Report:
    """Compare explicit settings (and the version's defaults) with the wants.

    ``context`` names where unset flags were looked for, for messages.
    """
    expect = dict(expect or {})
    forbid = list(forbid or [])
    who = f"vLLM {version}" if version else "this vLLM"
    unsupported = [_unknown_problem(item, version, who) for item in unknown]
    seen: dict[str, str] = {}
    wanted = _wanted(table, version, expect, seen, unsupported)
    forbidden = _forbidden(table, version, forbid, seen, unsupported)

    mismatches: list[Mismatch] = []
    for flag, expected, _name in wanted:
        mismatch = _expect_mismatch(flag, expected, settings, version, context)
        if mismatch is not None:
            mismatches.append(mismatch)
    for flag in forbidden:
        setting = settings.get(flag.dest)
        if setting is None:
            continue
        mismatches.append(Mismatch(
            flag.dest, None, setting.value, setting.source, "forbid",
            f"{flag.dest}: must not be set, running {format_value(setting.value)} ({_set_by(setting)})"))

    explicit = {dest: s.value for dest, s in settings.items()}
    effective: dict[str, Any] = {}
    for dest in list(explicit) + [f.dest for f, _e, _n in wanted] + [f.dest for f in forbidden]:
        if dest in explicit:
            effective[dest] = explicit[dest]
        else:
            flag = table.flags[dest]
            effective[dest] = flag.default if flag.default_known else None
    return Report(version, explicit, effective, mismatches, unsupported)


def version_mismatch(installed: str | None, logged: str | None) -> Mismatch | None:
    """The boot log's version differs from the installed one: a restart is due."""
    if not installed or not logged:
        return None
    try:
        if release_tuple(installed) == release_tuple(logged):
            return None
    except ValueError:
        if installed == logged:
            return None
    return Mismatch(
        "vllm_version", installed, logged, SOURCE_LOG, "version",
        f"vllm_version: installed {installed}, but the boot log shows the server started "
        f"with {logged}; restart it to run the installed version")
