"""Responses of the REST API that act once they have been sent."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpResponse


class AfterSendResponse(HttpResponse):
    """The response ninja fills in for a view (the API's temporal response, ``ollm_site.api``): the actions
    ``after_sent`` adds run when it is closed, which the server does once its body is sent."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.after_sent: list[Callable[[], None]] = []

    def close(self) -> None:
        try:
            for action in self.after_sent:
                action()
        finally:
            super().close()


def after_sent(response: HttpResponse, action: Callable[[], None]) -> None:
    """Run ``action`` once ``response`` has been sent; at once when it is not an AfterSendResponse."""
    if isinstance(response, AfterSendResponse):
        response.after_sent.append(action)
    else:
        action()
