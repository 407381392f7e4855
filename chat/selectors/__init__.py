"""Reads of the conversation domain: sessions and their histories (sessions), the context a model sees
and its budget (context), snapshot contents and the views of them the pages and API share."""
