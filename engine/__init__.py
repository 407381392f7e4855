"""The context engine: budget, tiers, selection, aging, prompts, reliability (core) and the model
calls (llm), in plain Python that imports nothing of Django or of the app."""
