from __future__ import annotations

from django.urls import path

from chat.web import model_views, views

app_name = "chat"
urlpatterns = [
    path("", views.session_list, name="session_list"),
    path("sessions/new/", views.session_new, name="session_new"),
    path("sessions/new-chat/", views.session_new_chat, name="session_new_chat"),
    path("sidebar/", views.sidebar_list, name="sidebar"),
    path("account/", views.account, name="account"),
    path("sessions/export/", views.sessions_export_selected, name="sessions_export"),
    path("sessions/<uuid:session_id>/", views.chat_page, name="chat"),
    path("sessions/<uuid:session_id>/rename/", views.session_rename, name="session_rename"),
    path("sessions/<uuid:session_id>/delete/", views.session_remove, name="session_remove"),
    path("sessions/<uuid:session_id>/export/", views.session_export, name="session_export"),
    path("sessions/<uuid:session_id>/archive/", views.session_archive_download, name="session_archive"),
    path("sessions/<uuid:session_id>/archived/", views.session_archived, name="session_archived"),
    path("sessions/<uuid:session_id>/history/", views.session_full_history, name="session_full_history"),
    path("sessions/<uuid:session_id>/context/", views.context_window, name="context_window"),
    path("sessions/<uuid:session_id>/meter/", views.context_meter_partial, name="context_meter"),
    path("sessions/<uuid:session_id>/model/", views.session_model, name="session_model"),
    path(
        "sessions/<uuid:session_id>/model/switch/",
        model_views.session_model_switch_view,
        name="session_model_switch",
    ),
    path("sessions/<uuid:session_id>/settings/", views.session_settings, name="session_settings"),
    path(
        "sessions/<uuid:session_id>/messages/<int:message_id>/version/",
        views.message_version,
        name="message_version",
    ),
    path("sessions/<uuid:session_id>/continue/", views.session_continue_view, name="session_continue"),
    path("sessions/<uuid:session_id>/messages/<int:message_id>/branch/", views.message_branch, name="message_branch"),
]
