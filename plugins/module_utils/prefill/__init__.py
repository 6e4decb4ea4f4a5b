"""Whether an engine's prefill got slower than its own baseline (vllm_prefill_probe):
the rule and /metrics (decision), the HTTP side (client) and the probe's steps
(probe)."""
