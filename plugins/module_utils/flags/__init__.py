"""The flags a vLLM server runs with, against what the inventory wants
(vllm_flags_info; report.py decides): the version's flag table from
``vllm serve --help=all`` (help, help_cache), what a source sets (cmdline, the
boot log's bootlog, a unit's ExecStart against its process: drift), typed
values (settings, values), the check (check, history), secrets masked
(secrets_mask) and the errors the module maps (errors)."""
