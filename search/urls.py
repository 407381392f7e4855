from __future__ import annotations

from django.urls import path

from search import views

app_name = "search"
urlpatterns = [
    path("search/", views.search_page, name="search"),
    path("search/export/", views.search_export, name="export"),
]
