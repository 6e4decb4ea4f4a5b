"""The ansible-playbook command lines the toolkit prints in its advice, refusals
and hints: the run's own ``-i`` options (vllm_fleet_inventory_arg) before the
playbook, so that a copied command reaches the inventory of the run that
printed it.

Standard library only.
"""
from __future__ import annotations

import typing as t


def command(inventory_arg: t.Any, playbook: str, *options: str) -> str:
    """``ansible-playbook <inventory_arg> <playbook> <options>``, with no gap for an
    empty part ('' or anything but a string as ``inventory_arg``: no -i)."""
    arg = inventory_arg.strip() if isinstance(inventory_arg, str) else ""
    return " ".join(part for part in ("ansible-playbook", arg, playbook, *options) if part)
