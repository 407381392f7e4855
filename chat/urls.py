from __future__ import annotations

from django.urls import path

from chat import views

app_name = "chat"
urlpatterns = [path("", views.session_list, name="session_list")]
