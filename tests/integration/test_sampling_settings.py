"""A session's sampling settings (temperature, repeat penalty, top_k, top_p): set in its settings panel or
through the REST API, checked with clear errors, over the global defaults (OLLM_CONTEXT_DEFAULTS), and
sent with every reply of a chat turn; unset, the model server's defaults apply."""

from __future__ import annotations

import re

import pytest
from django.test import override_settings
from django.urls import reverse

from chat.selectors.context import session_sampling
from chat.services.sessions import session_continue, session_create, session_update
from chat.services.turn import TurnSend, turn_take
from engine.llm.embedded import MODEL_NAME
from engine.llm.types import Sampling
from tests.factories import sampled_options, settings_form

JSON = "application/json"


@pytest.mark.django_db
def test_the_panel_saves_sampling_and_shows_it_back(chat_session, owner_client):
    url = reverse("chat:session_settings", args=[chat_session.pk])
    response = owner_client.post(url, settings_form(temperature="0.4", repeat_penalty="1.15", top_k="", top_p="0.95"))
    assert response.status_code == 200
    assert b"Saved." in response.content
    chat_session.refresh_from_db()
    assert chat_session.settings["sampling"] == {"temperature": 0.4, "repeat_penalty": 1.15, "top_p": 0.95}
    assert session_sampling(chat_session) == Sampling(temperature=0.4, top_p=0.95, repeat_penalty=1.15)
    panel = owner_client.get(reverse("chat:chat", args=[chat_session.pk])).content.decode()
    assert re.search(r'name="temperature"[^>]* value="0.4" placeholder="model\'s default"', panel)
    assert re.search(r'name="top_k"[^>]* value="" placeholder="model\'s default"', panel)
    assert "temperature 0.8, repeat penalty 1.1 over the last 64 tokens, top k 40, top p 0.9" in panel

    # Emptied, a field follows the default again; what only the API sets (a seed) stays.
    session_update(session=chat_session, settings={"sampling": {"temperature": 0.4, "seed": 9}})
    assert owner_client.post(url, settings_form(temperature="", repeat_penalty="1.1")).status_code == 200
    chat_session.refresh_from_db()
    assert chat_session.settings["sampling"] == {"seed": 9, "repeat_penalty": 1.1}
    assert owner_client.post(url, settings_form()).status_code == 200
    chat_session.refresh_from_db()
    assert chat_session.settings["sampling"] == {"seed": 9}


@pytest.mark.django_db
def test_the_panel_shows_the_global_default_a_field_follows(chat_session, owner_client):
    with override_settings(OLLM_CONTEXT_DEFAULTS={"sampling": {"temperature": 0.7}}):
        panel = owner_client.get(reverse("chat:chat", args=[chat_session.pk])).content.decode()
        assert re.search(r'name="temperature"[^>]* value="" placeholder="default: 0.7"', panel)
        assert session_sampling(chat_session) == Sampling(temperature=0.7)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"temperature": "2.5"}, "sampling.temperature must be a number from 0 to 2 (or null: the model's default)"),
        ({"temperature": "warm"}, "sampling.temperature must be a number from 0 to 2"),
        ({"repeat_penalty": "0.2"}, "sampling.repeat_penalty must be a number from 0.5 to 2"),
        ({"top_k": "-1"}, "sampling.top_k must be a whole number of 0 or more"),
        ({"top_k": "2.5"}, "sampling.top_k must be a whole number of 0 or more"),
        ({"top_p": "1.5"}, "sampling.top_p must be a number from 0 to 1"),
    ],
)
def test_the_panel_refuses_sampling_out_of_range_clearly(chat_session, owner_client, changes, message):
    response = owner_client.post(reverse("chat:session_settings", args=[chat_session.pk]), settings_form(**changes))
    assert response.status_code == 422
    assert message in response.content.decode().replace("&#x27;", "'")
    chat_session.refresh_from_db()
    assert chat_session.settings == {}


@pytest.mark.django_db
def test_the_api_sets_and_shows_sampling_and_refuses_bad_values(api, chat_session):
    url = f"/api/sessions/{chat_session.id}"
    unset = {"temperature": None, "top_k": None, "top_p": None, "repeat_penalty": None, "repeat_last_n": None}
    assert api.get(url).json()["sampling"] == {**unset, "seed": None}
    settings = {"sampling": {"temperature": 0.2, "top_k": 20, "repeat_last_n": 128, "seed": 3}}
    response = api.patch(url, {"settings": settings}, content_type=JSON)
    assert response.status_code == 200
    assert response.json()["settings"] == settings
    assert response.json()["sampling"] == {**unset, **settings["sampling"]}
    for bad, detail in [
        ({"sampling": {"temperature": 3}}, "sampling.temperature must be a number from 0 to 2"),
        ({"sampling": {"repeat_penalty": 0}}, "sampling.repeat_penalty must be a number from 0.5 to 2"),
        ({"sampling": {"top_p": -0.1}}, "sampling.top_p must be a number from 0 to 1"),
        ({"sampling": {"top_k": "many"}}, "sampling.top_k must be a whole number of 0 or more"),
        ({"sampling": {"min_p": 0.1}}, "sampling has unknown settings: min_p"),
    ]:
        refused = api.patch(url, {"settings": bad}, content_type=JSON)
        assert refused.status_code == 422, bad
        assert detail in str(refused.json()["detail"]), refused.json()
    chat_session.refresh_from_db()
    assert chat_session.settings == settings


@pytest.mark.django_db
def test_a_continued_session_keeps_its_sampling(user, app_gateway):
    session = session_create(owner=user, model=MODEL_NAME, context_size=2048, settings={"sampling": {"top_k": 5}})
    assert session_sampling(session_continue(session=session)) == Sampling(top_k=5)


@pytest.mark.django_db(transaction=True)
@override_settings(OLLM_REPLY_MAX_TOKENS=4, OLLM_CONTEXT_DEFAULTS={"sampling": {"temperature": 0.6}})
async def test_a_turn_sends_the_sessions_sampling_and_leaves_the_rest_to_the_server(user, app_gateway, fake_ollama):
    from asgiref.sync import sync_to_async

    tuned = await sync_to_async(session_create)(
        owner=user, model=MODEL_NAME, context_size=2048, settings={"sampling": {"repeat_penalty": 1.3, "top_p": 0.8}}
    )
    await turn_take(session_id=tuned.pk, variant=TurnSend("Say hello."))
    plain = await sync_to_async(session_create)(owner=user, model=MODEL_NAME, context_size=2048)
    await turn_take(session_id=plain.pk, variant=TurnSend("Say hello."))
    unset = await sync_to_async(session_create)(
        owner=user, model=MODEL_NAME, context_size=2048, settings={"sampling": {"temperature": None}}
    )
    await turn_take(session_id=unset.pk, variant=TurnSend("Say hello."))
    assert sampled_options(fake_ollama) == [
        {"temperature": 0.6, "repeat_penalty": 1.3, "top_p": 0.8},
        {"temperature": 0.6},
        {},
    ]
