"""Helpers that the other packages share, standard library only: numbers from
outside read and quoted without raising (numeric), version strings parsed and
ordered (versions), Python reprs read (pyrepr), and a wait inside one module
call (polling)."""
