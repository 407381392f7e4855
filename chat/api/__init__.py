"""The REST API (django-ninja routers and their schemas): sessions and messages, and the context
engine's goals, checkpoints, snapshots and events."""
