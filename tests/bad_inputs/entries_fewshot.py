"""Matrix entries."""

ENTRIES: list = []
