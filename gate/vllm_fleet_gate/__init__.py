"""vllm-fleet's admission gate: an OpenAI-compatible reverse proxy that
admits requests to vLLM engines by their KV-cache pool. See docs/gate.md."""

__version__ = "0.3.0"
