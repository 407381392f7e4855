"""Writes of the context manager, one module per entity; each function is one domain action."""
