"""The chat websocket's guards beyond its first handshake (issue 22): a socket ends with its
login, and only the site's own origin (scheme, host and port) or a trusted one may open it."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client, override_settings

from chat.models import Message, Snapshot
from chat.services.snapshots import snapshot_create
from tests.factories import SOCKET_TIMEOUT, session_cookie, socket

pytestmark = pytest.mark.django_db(transaction=True)

SEND = json.dumps({"action": "send", "message": "Are you still there?"})


def cookie_of(communicator: WebsocketCommunicator) -> str:
    return str(dict(communicator.scope["headers"])[b"cookie"].decode())


def log_out(cookie: str) -> None:
    """The browser that holds ``cookie`` logs out (the logout view flushes its session)."""
    client = Client()
    name, value = cookie.split("=", 1)
    client.cookies[name] = value
    assert client.post("/accounts/logout/").status_code in (200, 302)


async def closed_with(communicator: WebsocketCommunicator) -> int | None:
    output = await communicator.receive_output(timeout=SOCKET_TIMEOUT)
    assert output["type"] == "websocket.close", output
    code: int | None = output.get("code")
    return code


# --- a socket ends with its login ----------------------------------------------------------------


async def test_a_frame_after_logout_closes_the_socket_and_stores_nothing(small_session, user):
    communicator = await socket(small_session.pk, user)
    assert (await communicator.connect())[0]
    # While logged in, frames are read (this one is refused for what it says, not who sends it).
    await communicator.send_to(text_data=json.dumps({"action": "send", "message": "  "}))
    assert "The message is empty." in await communicator.receive_from(timeout=SOCKET_TIMEOUT)

    await sync_to_async(log_out)(cookie_of(communicator))
    await communicator.send_to(text_data=SEND)
    assert await closed_with(communicator) == 4401
    await communicator.disconnect()
    assert await Message.objects.filter(session=small_session).acount() == 0


async def test_another_browsers_logout_leaves_this_socket_open(small_session, user):
    communicator = await socket(small_session.pk, user)
    assert (await communicator.connect())[0]
    await sync_to_async(log_out)((await sync_to_async(session_cookie)(user)).decode())
    await communicator.send_to(text_data=json.dumps({"action": "send", "message": "  "}))
    assert "The message is empty." in await communicator.receive_from(timeout=SOCKET_TIMEOUT)
    await communicator.disconnect()


async def test_a_deactivated_user_s_socket_closes_at_its_next_frame(small_session, user):
    communicator = await socket(small_session.pk, user)
    assert (await communicator.connect())[0]
    user.is_active = False
    await user.asave(update_fields=["is_active"])
    await communicator.send_to(text_data=json.dumps({"action": "stop"}))
    assert await closed_with(communicator) == 4401
    await communicator.disconnect()


async def test_a_password_change_elsewhere_closes_the_socket(small_session, user):
    communicator = await socket(small_session.pk, user)
    assert (await communicator.connect())[0]
    user.set_password("a-new-password-7781")
    await user.asave(update_fields=["password"])
    await communicator.send_to(text_data=SEND)
    assert await closed_with(communicator) == 4401
    await communicator.disconnect()
    assert await Message.objects.filter(session=small_session).acount() == 0


# --- a socket ends with its login at once, not at its next frame (issue 36) ------------------------------


def _log_out_here(communicator: WebsocketCommunicator, user) -> None:
    log_out(cookie_of(communicator))


def _change_password(communicator: WebsocketCommunicator, user) -> None:
    user.set_password("a-new-password-7781")
    user.save()


def _deactivate(communicator: WebsocketCommunicator, user) -> None:
    user.is_active = False
    user.save(update_fields=["is_active"])


@pytest.mark.parametrize(
    "end", [_log_out_here, _change_password, _deactivate], ids=["logout", "password change", "deactivation"]
)
async def test_the_end_of_a_login_closes_the_socket_at_once_and_nothing_reaches_it_after(small_session, user, end):
    communicator = await socket(small_session.pk, user)
    assert (await communicator.connect())[0]
    await sync_to_async(end)(communicator, user)
    # No frame was sent: the end of the login itself closed it.
    assert await closed_with(communicator) == 4401
    # A snapshot pushes its event to every open page of the session; this one hears nothing.
    await sync_to_async(snapshot_create)(session=small_session, kind=Snapshot.Kind.MANUAL, reason="after")
    assert await communicator.receive_nothing(timeout=1)
    await communicator.disconnect()


async def test_a_logout_elsewhere_leaves_the_socket_open_and_hearing(small_session, user):
    communicator = await socket(small_session.pk, user)
    assert (await communicator.connect())[0]
    await sync_to_async(log_out)((await sync_to_async(session_cookie)(user)).decode())
    await sync_to_async(snapshot_create)(session=small_session, kind=Snapshot.Kind.MANUAL, reason="still here")
    assert "still here" in await communicator.receive_from(timeout=SOCKET_TIMEOUT)
    await communicator.disconnect()


async def test_a_save_that_keeps_the_login_leaves_the_socket_open(small_session, user):
    communicator = await socket(small_session.pk, user)
    assert (await communicator.connect())[0]
    user.first_name = "Alice"
    await user.asave()
    await communicator.send_to(text_data=json.dumps({"action": "send", "message": "  "}))
    assert "The message is empty." in await communicator.receive_from(timeout=SOCKET_TIMEOUT)
    await communicator.disconnect()


# --- the origin: scheme, host and port --------------------------------------------------------------


async def opened(
    session_id, user, *, origin: str | None, host: str | None, scheme: str | None = None, **headers: str
) -> bool:
    """Whether a socket with these handshake headers is accepted (it is closed again)."""
    from ollm_site.asgi import application

    sent = [(b"cookie", await sync_to_async(session_cookie)(user))]
    sent += [(name.encode(), value.encode()) for name, value in [("origin", origin), ("host", host)] if value]
    sent += [(name.replace("_", "-").encode(), value.encode()) for name, value in headers.items()]
    communicator = WebsocketCommunicator(application, f"/ws/sessions/{session_id}/", headers=sent)
    if scheme is not None:
        communicator.scope["scheme"] = scheme
    connected, _ = await communicator.connect(timeout=SOCKET_TIMEOUT)
    await communicator.disconnect()  # a refused consumer still listens on the channel layer
    return bool(connected)


@pytest.mark.parametrize(
    ("origin", "host"),
    [
        ("http://testserver", "testserver"),  # the test client's own origin
        ("http://localhost:8000", "localhost:8000"),
        ("http://127.0.0.1:8765", "127.0.0.1:8765"),
        ("http://[::1]:8765", "[::1]:8765"),  # an IPv6 literal
        ("http://LocalHost:8000", "localhost:8000"),  # host names compare case-insensitively
        ("http://localhost", "localhost:80"),  # the default port, written or not
        ("http://localhost", None),  # no Host (in-process clients): an allowed host, default port
    ],
)
async def test_the_sites_own_origin_is_accepted(small_session, user, origin, host):
    assert await opened(small_session.pk, user, origin=origin, host=host)


@pytest.mark.parametrize(
    ("origin", "host"),
    [
        ("http://127.0.0.1:9999", "127.0.0.1:8000"),  # another port
        ("http://localhost:1234", "localhost:8000"),
        ("http://localhost:1234", None),
        ("http://[::1]:9999", "[::1]:8765"),
        ("http://127.0.0.1:8000", "localhost:8000"),  # another (allowed) host
        ("http://evil.example:8000", "localhost:8000"),
        ("https://localhost:8000", "localhost:8000"),  # another scheme
        ("http://evil.example", "evil.example"),  # a Host outside ALLOWED_HOSTS (DNS rebinding)
        ("null", "localhost:8000"),  # a sandboxed page, a file
        ("http://localhost:8000/page", "localhost:8000"),  # not an origin
        ("http://evil.example@localhost:8000", "localhost:8000"),
        ("http://localhost:99999", "localhost:99999"),
        (None, "localhost:8000"),  # no Origin: refused, as channels' own validator refuses it
    ],
)
async def test_another_origin_is_refused(small_session, user, origin, host):
    assert not await opened(small_session.pk, user, origin=origin, host=host)


async def test_a_socket_over_tls_belongs_to_the_https_origin(small_session, user):
    assert await opened(small_session.pk, user, origin="https://localhost:8443", host="localhost:8443", scheme="wss")
    assert not await opened(small_session.pk, user, origin="http://localhost:8443", host="localhost:8443", scheme="wss")


async def test_a_tls_terminating_proxy_is_trusted_only_when_configured(small_session, user):
    https = {"origin": "https://localhost", "host": "localhost", "x_forwarded_proto": "https"}
    assert not await opened(small_session.pk, user, **https)
    with override_settings(SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https")):
        assert await opened(small_session.pk, user, **https)
        assert not await opened(
            small_session.pk, user, origin="http://localhost", host="localhost", x_forwarded_proto="https"
        )


@override_settings(OLLM_TRUSTED_ORIGINS=["https://chat.example.com", "https://*.example.org"])
async def test_a_trusted_origin_from_the_settings_is_accepted(small_session, user):
    # A reverse proxy that passes its own address as the Host.
    assert await opened(small_session.pk, user, origin="https://chat.example.com", host="127.0.0.1:8000")
    assert await opened(small_session.pk, user, origin="https://chat.example.com:443", host="127.0.0.1:8000")
    assert await opened(small_session.pk, user, origin="https://a.example.org", host="127.0.0.1:8000")
    assert not await opened(small_session.pk, user, origin="http://chat.example.com", host="127.0.0.1:8000")
    assert not await opened(small_session.pk, user, origin="https://chat.example.com:8443", host="127.0.0.1:8000")
    assert not await opened(small_session.pk, user, origin="https://example.org", host="127.0.0.1:8000")
    assert not await opened(small_session.pk, user, origin="https://evilexample.org", host="127.0.0.1:8000")


@pytest.mark.parametrize(
    "path", ["/ws/", "/ws/sessions/xyz/", "/nowhere", "/ws/sessions/00000000-0000-0000-0000-000000000000/x/"]
)
async def test_an_unknown_socket_path_is_refused_with_4404_not_an_error(user, path):
    from ollm_site.asgi import application

    headers = [(b"cookie", await sync_to_async(session_cookie)(user)), (b"origin", b"http://testserver")]
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, code = await communicator.connect(timeout=SOCKET_TIMEOUT)
    await communicator.disconnect()
    assert (connected, code) == (False, 4404)
