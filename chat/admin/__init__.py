"""The admin of the conversation domain: sessions and their messages (sessions), and the context
engine's records (context). Importing them registers them."""

from chat.admin import context, sessions

__all__ = ["context", "sessions"]
