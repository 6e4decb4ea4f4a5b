"""Self-healing's bookkeeping, on the engine's head: the cure ledger every
restart appends to (ledger), the restart budget read from it (budget) and the
toolkit's own series for node-exporter's textfile collector (textfile)."""
