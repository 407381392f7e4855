"""Writes of the conversation domain, one module per entity or action; each public function is one
domain action with its preconditions in its docstring."""
