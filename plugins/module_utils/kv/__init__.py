"""The engine's KV cache pool, read from vLLM's startup output: the scan
(scanner), the pool it reports (pool), why no capacity line was found
(not_found), the sessions policy (sessions), where the output comes from
(sources), and the errors (errors)."""
