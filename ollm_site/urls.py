from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from accounts.views import LoginView
from chat.dropin import ollama_api, openai_api
from ollm_site.api import api

admin.site.site_header = "ollm-site review"
admin.site.site_title = "ollm-site"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/login/", LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/", api.urls),
    # Drop-in endpoints for Ollama's and OpenAI's clients (docs/drop-in.md).
    path("ollama/", include(ollama_api.urlpatterns)),
    path("v1/", include(openai_api.urlpatterns)),
    path("account/", include("accounts.urls")),
    path("", include("chat.web.context_urls")),
    path("", include("chat.web.urls")),
    path("", include("search.urls")),
]
