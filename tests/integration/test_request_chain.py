"""How a request crosses threads on its way through the ASGI application."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import SyncToAsync, sync_to_async
from channels.testing import HttpCommunicator
from django.test import Client

from accounts.services import api_token_create
from ollm_site.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_request_enters_the_synchronous_stack_once(user, monkeypatch):
    """The middleware chain runs in the request's thread as a whole, the view included: the request
    hops into it once, rather than twice per middleware (which doubled the cost of a small request)
    and once more for the view through the event loop. Django's own signal and the response's close
    account for the rest."""
    token = (await sync_to_async(api_token_create)(user=user, name="hops"))[1]
    hops: list[str] = []
    enter = SyncToAsync.__call__

    async def counted(self: SyncToAsync[Any, Any], *args: Any, **kwargs: Any) -> Any:
        hops.append(getattr(self.func, "__qualname__", repr(self.func)))
        return await enter(self, *args, **kwargs)

    monkeypatch.setattr(SyncToAsync, "__call__", counted)
    communicator = HttpCommunicator(
        application,
        "GET",
        "/api/context-sizes",
        headers=[(b"host", b"localhost"), (b"authorization", f"Bearer {token}".encode())],
    )
    response = await communicator.get_response(timeout=60)
    await communicator.wait(timeout=60)
    assert response["status"] == 200
    assert not any("process_request" in hop or "process_response" in hop for hop in hops), hops
    # The REST API's responses are AfterSendResponses (chat.api.responses): their close is the response's close.
    closes = ("HttpResponseBase.close", "AfterSendResponse.close")
    chain = [hop for hop in hops if not hop.startswith(("Signal.", *closes))]
    assert chain == ["convert_exception_to_response.<locals>.inner"], hops


async def test_the_synchronous_chain_still_checks_csrf_and_the_login(user):
    """Through the ASGI application as served: a logged-in page loads, an unsafe request
    without the CSRF token is refused, and an anonymous one is sent to the login page."""
    client = Client()
    await sync_to_async(client.force_login)(user)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()

    async def request(method: str, path: str, *, logged_in: bool) -> dict[str, Any]:
        headers = [(b"host", b"localhost")] + ([(b"cookie", cookie)] if logged_in else [])
        communicator = HttpCommunicator(application, method, path, headers=headers)
        response: dict[str, Any] = await communicator.get_response(timeout=60)
        await communicator.wait(timeout=60)
        return response

    page = await request("GET", "/", logged_in=True)
    assert page["status"] == 200
    assert b"Log out" in page["body"]
    assert (await request("POST", "/sessions/new/", logged_in=True))["status"] == 403
    anonymous = await request("GET", "/", logged_in=False)
    assert anonymous["status"] == 302
    assert dict(anonymous["headers"])[b"Location"].startswith(b"/accounts/login/")
