from __future__ import annotations

from django.urls import path

from accounts import views

app_name = "accounts"
urlpatterns = [
    path("first/", views.first_account, name="first_account"),
    path("tokens/", views.tokens, name="tokens"),
    path("tokens/<int:token_id>/revoke/", views.token_revoke, name="token_revoke"),
    path("tokens/<int:token_id>/tasks/", views.token_tasks, name="token_tasks"),
]
