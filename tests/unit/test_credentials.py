"""A host's URL is shown without the credentials it may carry (issue 49, item 4)."""

from __future__ import annotations

import pytest

from engine.core.text import without_credentials, without_urls


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("http://user:pw@host:11434", "http://host:11434"),
        ("https://token@ollama.example.org/api", "https://ollama.example.org/api"),
        (
            "Ollama is not reachable at http://a:b@10.0.0.1:11434, https://c:d@10.0.0.2",
            "Ollama is not reachable at http://10.0.0.1:11434, https://10.0.0.2",
        ),
        ("http://127.0.0.1:11434", "http://127.0.0.1:11434"),
        ("mail alice@example.org", "mail alice@example.org"),
        ("http://host/path@x", "http://host/path@x"),
    ],
)
def test_the_user_information_of_every_url_is_taken_out(text, shown):
    assert without_credentials(text) == shown


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (
            "Ollama is not reachable at http://u:p@10.0.0.1:11434: start it",
            "Ollama is not reachable at its host: start it",
        ),
        ("hosts http://a:1, https://b/x; done.", "hosts its host, its host; done."),
        ("nothing to hide", "nothing to hide"),
    ],
)
def test_an_ordinary_user_reads_no_host_url(text, shown):
    """Issue 49, item 5: an ordinary user reads that the model is unavailable, never where its host is."""
    assert without_urls(text) == shown
