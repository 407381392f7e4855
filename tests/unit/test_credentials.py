"""A host's URL is shown without the credentials it may carry (issue 49, item 4)."""

from __future__ import annotations

import pytest

from engine.core.text import without_credentials


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
