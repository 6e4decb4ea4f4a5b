"""vLLM's command line for the unit's ExecStart=: a dict of ``vllm serve`` flags
as argv (:func:`vllm_argv`), and each word quoted for a systemd Exec line
(:func:`systemd_quote`). ``plugins/filter/fleet.py`` registers both as filters and
raises :class:`ArgvError` as AnsibleFilterError.

Standard library only.
"""
from __future__ import annotations

import json

from ansible.module_utils.shared.numeric import shown


class ArgvError(ValueError):
    """A flag value or a word no command line can carry; its text is the filter's failure message."""


def vllm_argv(flags):
    """Render a dict of ``vllm serve`` flags (argparse dest names) as argv.

    ``True`` gives ``--flag``, ``False`` gives ``--no-flag``, ``None`` drops
    the flag, a dict or list is passed as compact JSON with sorted keys;
    insertion order is kept.
    """
    argv = []
    for dest, value in (flags or {}).items():
        opt = "--" + str(dest).replace("_", "-")
        if value is None:
            continue
        if value is True:
            argv.append(opt)
        elif value is False:
            argv.append("--no-" + opt[2:])
        else:
            try:
                word = (json.dumps(value, sort_keys=True, separators=(",", ":"))
                        if isinstance(value, (dict, list, tuple)) else str(value))
            except ValueError:  # an int of more than 4,300 digits, which no flag takes
                raise ArgvError(f"vllm_argv: {opt} is {shown(value)}, which no vLLM flag takes; "
                                         "fix the number") from None
            argv += [opt, word]
    return argv


_SAFE = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./:=,+-@")


# systemd.syntax(7) "Quoting": C escapes inside a quoted item. A raw newline
# would end the ExecStart= line, so control characters must be escaped.
_C_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r",
              "\a": "\\a", "\b": "\\b", "\f": "\\f", "\v": "\\v"}


def _escape(c: str) -> str:
    if c in _C_ESCAPES:
        return _C_ESCAPES[c]
    if c == "%":  # specifiers (systemd.unit(5)) are expanded on the whole line first
        return "%%"
    if c == "$":  # environment variables are expanded in each argument at exec time
        return "$$"
    if ord(c) < 0x20 or ord(c) == 0x7F:
        return "\\x%02x" % ord(c)
    return c


def systemd_quote(arg):
    """Quote one word for a systemd Exec line (systemd.service(5), "Command
    lines"): safe words stay bare, others are double-quoted with C escapes,
    ``%%`` for ``%`` and ``$$`` for ``$``."""
    arg = str(arg)
    if "\0" in arg:
        raise ArgvError(f"systemd_quote: {arg!r} contains a NUL byte, which no argument can carry")
    if arg and all(c in _SAFE for c in arg):
        return arg
    return '"' + "".join(_escape(c) for c in arg) + '"'
