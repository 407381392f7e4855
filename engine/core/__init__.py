"""The context engine: budget, tiers, selection, aging, prompts, goal markers,
reliability and token counting as pure functions over frozen dataclasses.

Nothing in this package imports Django, Channels, Celery or Ninja: the Django
apps adapt it, so it can be tested (and reasoned about) without a database.
"""
