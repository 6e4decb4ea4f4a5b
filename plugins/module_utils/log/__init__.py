"""What programs print, read as text: terminal escape sequences stripped from
captured output (ansi)."""
