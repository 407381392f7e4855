from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

admin.site.site_header = "ollm-site review"
admin.site.site_title = "ollm-site"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("chat.urls")),
]
