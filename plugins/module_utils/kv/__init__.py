"""The engine's KV cache pool, read from vLLM's startup output: the scan
(scanner), what it reports (report), why a line is missing (diagnosis), the
sessions policy (sessions), where the output comes from (sources), errors."""
