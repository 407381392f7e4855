"""A test-local URLconf: the search router mounted on its own NinjaAPI at /api/search, plus the site's URLs."""

from __future__ import annotations

from django.urls import path
from ninja import NinjaAPI

from ollm_site.urls import urlpatterns as site_urlpatterns
from search.api import router

api = NinjaAPI(urls_namespace="search-api-test")
api.add_router("/search", router)

urlpatterns = [path("api/", api.urls), *site_urlpatterns]
