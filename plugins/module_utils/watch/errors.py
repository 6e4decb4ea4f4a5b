# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The self-healing bookkeeping's one exception (its messages quote values
with shared/numeric.py's brief).

Shared by ledger.py, budget.py and textfile.py; it imports none of them.
"""

from __future__ import annotations


class WatchError(ValueError):
    """Input the ledger, the budget or the metrics cannot use; the message says what to check."""
