"""What programs print, read as text: terminal escape sequences stripped from
captured output (ansi), vLLM's log lines taken apart (lines)."""
