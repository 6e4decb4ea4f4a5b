"""The engine's KV cache pool, read from vLLM's startup output (cache)."""
