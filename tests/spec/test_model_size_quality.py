"""Compression Quality by Model Size"""

from __future__ import annotations

import pytest
from django.urls import reverse

from chat.services.compression import compression_run
from tests.factories import session_on_model_of_size, until_due
from tests.support.model_server import UNTAGGED_MODEL

pytestmark = pytest.mark.django_db

SMALL = "Recommend: 2-3 compressions max (small models, 3B-7B)."
MEDIUM = "Recommend: 3-5 compressions (medium models, 13B-30B)."
LARGE = "Recommend: 5-7 compressions (large models, 70B+)."


def _warnings_after_each_compression(session, gateway, fake_ollama, client, user, compressions: int) -> list[str]:
    """The chat page (logged in) after each of ``compressions`` compressions of the session."""
    fake_ollama.behaviour.canned_reply = "A recap of the answers so far, with the main points."
    client.force_login(user)
    pages = []
    turn = 0
    for _ in range(compressions):
        turn = until_due(session, start=turn)
        assert compression_run(session_id=session.pk, gateway=gateway).status == "compressed"
        response = client.get(reverse("chat:chat", args=[session.pk]))
        assert response.status_code == 200
        pages.append(response.content.decode())
    return pages


@pytest.mark.parametrize(
    ("size", "size_b", "first_warning", "recommend"),
    [("7B", 7.0, 2, SMALL), ("13B", 13.0, 3, MEDIUM), ("70B", 70.0, 5, LARGE)],
)
def test_the_page_warns_from_the_bands_recommended_count(
    size, size_b, first_warning, recommend, user, client, gateway, fake_ollama
):
    """Spec: "Small models (3B-7B): ... Recommend: 2-3 compressions max", "Medium models (13B-30B): ... Recommend:
    3-5 compressions", "Large models (70B+): ... Recommend: 5-7 compressions".

    Differs, see docs/conformance.md: "The model-size bands" — the chat page shows the spec's warning from the lower
    end of the model's range (2, 3, 5 compressions), with the band's recommendation, and not before."""
    session = session_on_model_of_size(user, size, gateway, fake_ollama)
    assert session.model_parameter_size_b == size_b, "the size Ollama reports is stored"
    pages = _warnings_after_each_compression(session, gateway, fake_ollama, client, user, first_warning)
    warning = f"Your model ({UNTAGGED_MODEL}) has compressed the conversation"
    for count, page in enumerate(pages[:-1], start=1):
        assert warning not in page, f"warned after {count} compressions"
        assert recommend not in page
    assert f"{warning} {first_warning} times." in pages[-1]
    assert recommend in pages[-1]


@pytest.mark.parametrize(("size", "first_warning", "recommend"), [("8B", 2, SMALL), ("31B", 3, MEDIUM), ("", 2, SMALL)])
def test_sizes_outside_the_bands_count_with_the_smaller_band(
    size, first_warning, recommend, user, client, gateway, fake_ollama
):
    """Spec: "Small models (3B-7B)", "Medium models (13B-30B)", "Large models (70B+)" leave out the sizes between
    them, below 3B and unknown sizes.

    Differs, see docs/conformance.md: "The model-size bands" — a size between two bands counts with the smaller
    one, as the spec's model factor groups it; an unknown size counts as small."""
    session = session_on_model_of_size(user, size, gateway, fake_ollama)
    pages = _warnings_after_each_compression(session, gateway, fake_ollama, client, user, first_warning)
    warning = f"Your model ({UNTAGGED_MODEL}) has compressed the conversation"
    assert all(warning not in page for page in pages[:-1])
    assert f"{warning} {first_warning} times." in pages[-1]
    assert recommend in pages[-1]
