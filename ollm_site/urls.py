from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from ollm_site.api import api

admin.site.site_header = "ollm-site review"
admin.site.site_title = "ollm-site"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("account/", include("accounts.urls")),
    path("", include("chat.urls")),
]
