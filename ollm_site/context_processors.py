"""What every page's template is given besides Django's own: the release, shown in the footer (templates/base.html)."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


def version(request: HttpRequest) -> dict[str, str]:
    """``site_version``: the release as pyproject.toml names it (``settings.OLLM_VERSION``)."""
    return {"site_version": settings.OLLM_VERSION}
