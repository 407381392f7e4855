"""The model hosts are the operators' business (issue 49, item 4): ``/api/hosts`` and the backend line's
reason are staff's only (403 on the API for anyone else, who sees only whether the LLM answers), and no
page, answer or message shows a host's URL with the credentials it may carry."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from engine.llm.gateway import Gateway
from engine.llm.ollama_backend import OllamaBackend
from tests.support.model_server import free_port

pytestmark = pytest.mark.django_db
SECRET = "s3cr3t-pass"


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def credentialed_gateway(use_gateway, embedded_backend, port):
    """The embedded model, and an Ollama host behind a proxy that wants credentials, which does not answer."""
    ollama = OllamaBackend(host=f"http://operator:{SECRET}@127.0.0.1:{port}", timeout=5, connect_timeout=1)
    return use_gateway(Gateway(mode="auto", embedded=embedded_backend, ollama=ollama))


@pytest.fixture
def staff(user):
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    return user


def test_the_hosts_are_refused_to_a_user_who_is_not_staff(api, credentialed_gateway):
    response = api.get("/api/hosts")
    assert response.status_code == 403
    assert response.json() == {"detail": "The model hosts are shown to staff only."}


def test_staff_see_the_hosts_without_credentials(api, staff, credentialed_gateway, port):
    response = api.get("/api/hosts")
    assert response.status_code == 200, response.content
    assert SECRET not in response.content.decode()
    assert "operator" not in response.content.decode()
    urls = [host["url"] for host in response.json()]
    assert f"http://127.0.0.1:{port}" in urls
    down = next(host for host in response.json() if host["url"] == f"http://127.0.0.1:{port}")
    assert down["up"] is False


def test_a_user_sees_only_whether_the_llm_answers(owner_client, credentialed_gateway, port):
    page = owner_client.get(reverse("chat:session_list")).content.decode()
    assert "Models: bundled" in page  # the embedded model answers, as Ollama does not
    assert f"127.0.0.1:{port}" not in page
    assert "not reachable" not in page


def test_staff_see_the_backend_s_reason_without_credentials(staff, credentialed_gateway, port):
    client = Client()
    client.force_login(staff)
    page = client.get(reverse("chat:session_list")).content.decode()
    assert f"Ollama is not reachable at http://127.0.0.1:{port}; using the embedded model" in page
    assert SECRET not in page
    assert "operator@" not in page
