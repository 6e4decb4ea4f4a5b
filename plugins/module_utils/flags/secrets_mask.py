# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Hiding secrets in what the flag check returns.

The values of ``--api-key`` and ``--hf-token`` and of ``*TOKEN*=`` /
``*KEY*=`` / ``*SECRET*=`` / ``*PASSWORD*=`` environment words are replaced by
:data:`MASK`, in command lines (:func:`mask_argv`) and in typed values
(:func:`mask_value`).
"""
from __future__ import annotations

import re
from typing import Any

from ansible.module_utils.flags.help import FlagTable, is_option, normalise_option

MASK = "********"
SECRET_DESTS = frozenset({"api_key", "hf_token"})
_SECRET_OPTIONS = frozenset({"--api-key", "--hf-token"})
_SECRET_ENV_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*(?:TOKEN|KEY|SECRET|PASSWORD)[A-Za-z0-9_]*)=(.+)$",
                            re.IGNORECASE)


def mask_value(dest: str, value: Any) -> Any:
    if dest not in SECRET_DESTS or value is None or isinstance(value, bool):
        return value
    if isinstance(value, (list, tuple)):
        return [MASK for _ in value]
    return MASK


def mask_argv(argv: list[str], table: FlagTable | None = None) -> list[str]:
    """Hide the values of --api-key / --hf-token and of *TOKEN*=/*KEY*= env words."""

    def secret_values(name: str) -> int:
        """How many following words a secret option takes (0: not a secret)."""
        name = normalise_option(name)
        flag = None
        if table is not None and name.startswith("-"):
            flag, _neg, _c = table.match_option(name)
        if flag is not None:
            if flag.dest not in SECRET_DESTS:
                return 0
            return len(argv) if flag.nargs in ("+", "*") else 1
        if name in _SECRET_OPTIONS:
            return len(argv) if name == "--api-key" else 1
        return 0

    out: list[str] = []
    masking = 0
    for token in argv:
        if masking and not is_option(token):
            out.append(MASK)
            masking -= 1
            continue
        masking = 0
        if is_option(token):
            name, eq, _value = token.partition("=")
            count = secret_values(name)
            if count and eq:
                out.append(name + "=" + MASK)
            else:
                out.append(token)
                masking = count
            continue
        if " " in token:
            # `bash -c "exec vllm serve ... --api-key K"`: one word holds a command
            out.append(" ".join(mask_argv(token.split(" "), table)))
            continue
        env = _SECRET_ENV_RE.match(token)
        out.append(f"{env.group(1)}={MASK}" if env else token)
    return out
