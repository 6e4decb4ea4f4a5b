# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The prefill probe's one exception (its messages quote values with shared/numeric.py's brief and quoted).

Shared by metrics.py (the ``/metrics`` parser), decision.py (baseline and
verdict) and client.py; it imports none of them.
"""

from __future__ import annotations


class PrefillError(ValueError):
    """Input the probe cannot use; the message says what to check."""

