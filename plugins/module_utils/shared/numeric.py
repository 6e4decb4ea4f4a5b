# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Numbers from outside (an inventory, a module's result, an option), read
without raising.

Python raises on numbers past what an int or a float holds, each its own way:
``float()`` of an int past 1.8e308 raises OverflowError, ``int()``, ``%d`` and
``round()`` raise on inf and nan, and ``str()``, ``repr()``, ``%s`` and
``json.dumps`` raise ValueError on an int of more than 4,300 digits
(``sys.int_info.str_digits_check_threshold``). So a number read from outside
goes through :func:`finite` first (inf, nan and such an int are no reading),
and a value quoted in a message through :func:`shown`.

Standard library only and no import of the project's other module_utils:
any of them may import it.
"""
from __future__ import annotations

import math

# A message quotes this much of a value at most.
SHOWN_CHARS = 80
# An int this long is shown by its length (str() refuses past 4,300 digits).
_SHOWN_DIGITS = 30


def finite(value):
    """``value`` when it is a finite int or float within float's range (not a
    bool), else None: inf, nan, an int past 1.8e308 and anything that is not
    a number are no reading. Never raises."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return value if math.isfinite(value) else None
    except OverflowError:  # an int past float's range
        return None


def finite_float(value):
    """A finite float from a number or numeric text (``"2.5"``, ``" 3 "``; not
    a bool), else None: ``float()`` reads "1e999" and 5,000 digits as inf, and
    raises OverflowError on an int past float's range. Never raises."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return finite(number)


def shown(value, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` for a message, cut to ``limit`` characters; an int of
    more than 30 digits reads as such. Never raises."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** _SHOWN_DIGITS:
        return "a number of more than %d digits" % _SHOWN_DIGITS
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001  (a container holding such an int, or a repr that fails)
        return "a %s" % type(value).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def quoted(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` for a message, without quotes: cut at ``limit``, control
    characters escaped."""
    return repr(text[:limit])[1:-1] + ("..." if len(text) > limit else "")


def brief(value) -> str:
    """What ``value`` is, for a message, short whatever its size or depth: a
    string quoted and cut at 40, an int past 64 bits by its size, a
    container by its type and length."""
    if isinstance(value, str):
        return "'%s'" % quoted(value, 40)
    if value is None or isinstance(value, (bool, float)):
        return repr(value)
    if isinstance(value, int):
        return repr(value) if value.bit_length() <= 64 else "an integer of %d bits" % value.bit_length()
    if isinstance(value, (list, tuple, dict)):
        return "a %s of %d" % (type(value).__name__, len(value))
    return "a %s" % type(value).__name__


def text(value) -> str:
    """``str(value)``, except that a value whose ``str()`` raises (an int of
    more than 4,300 digits, a list holding one) reads as :func:`shown` says.
    Never raises."""
    try:
        return str(value)
    except Exception:  # noqa: BLE001  (whatever str() raises, as for repr() in shown)
        return shown(value)
