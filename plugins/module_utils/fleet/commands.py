"""The ansible-playbook command lines the toolkit prints in its advice, refusals
and hints: the run's own ``-i`` options (vllm_fleet_inventory_arg) before the
playbook, so that a copied command reaches the inventory of the run that
printed it; those options themselves come from the run's inventory sources
(:func:`inventory_args`).

Standard library only.
"""
from __future__ import annotations

import os
import shlex
import typing as t


def command(inventory_arg: t.Any, playbook: str, *options: str) -> str:
    """``ansible-playbook <inventory_arg> <playbook> <options>``, with no gap for an
    empty part ('' or anything but a string as ``inventory_arg``: no -i)."""
    arg = inventory_arg.strip() if isinstance(inventory_arg, str) else ""
    return " ".join(part for part in ("ansible-playbook", arg, playbook, *options) if part)


def inventory_args(sources, config_file=None) -> str:
    """The ``-i`` options that name ``sources`` (``ansible_inventory_sources``)
    in a command the toolkit prints, so that a copied command reaches the
    inventory of the run that printed it. A path inside the repository (the
    directory of ``config_file``, its ansible.cfg, where the docs run every
    command) is given relative to it, as the docs write it; any other as it
    is. Quoted for a shell. No source: ``-i inventory/<site>``, to fill in."""
    if isinstance(sources, (str, bytes)):
        sources = [sources]
    root = os.path.dirname(os.path.abspath(str(config_file))) if config_file else None
    args = []
    for source in sources or ():
        source = str(source)
        if root and "," not in source and os.path.isabs(source):
            relative = os.path.relpath(source, root)
            if relative != ".." and not relative.startswith(".." + os.sep):
                source = relative
        args.append("-i " + shlex.quote(source))
    return " ".join(args) or "-i inventory/<site>"
