"""Make plugins/module_utils importable in this process as Ansible makes it for a module.

A module imports its logic as ``ansible.module_utils.<package>.<file>``: Ansible
finds it through ansible.cfg's ``module_utils`` and packs it into the module.
A process on the controller (a filter plugin, the unit tests, a benchmark)
gets no such path. Running this file puts plugins/module_utils on
``ansible.module_utils.__path__`` (once, however often it runs), after which
it imports the logic by the same names the modules do.

Its users run it by path (``runpy.run_path``): a filter plugin is no package
to import from, and Ansible loads every ``.py`` file in plugins/filter/ as a
filter plugin, so this one lives outside it.
"""
from __future__ import annotations

from pathlib import Path

import ansible.module_utils

MODULE_UTILS = str(Path(__file__).resolve().parent / "module_utils")

if MODULE_UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(MODULE_UTILS)
