from __future__ import annotations

from django.urls import path

from chat.web import context_views as views

app_name = "context"
urlpatterns = [
    path("sessions/<uuid:session_id>/timeline/", views.timeline, name="timeline"),
    path("sessions/<uuid:session_id>/compress/", views.compress_now, name="compress_now"),
    path("sessions/<uuid:session_id>/goals/", views.goal_new, name="goal_new"),
    path("sessions/<uuid:session_id>/decisions/", views.decision_new, name="decision_new"),
    path("sessions/<uuid:session_id>/artifacts/", views.artifact_new, name="artifact_new"),
    path("sessions/<uuid:session_id>/snapshots/", views.snapshot_new, name="snapshot_new"),
    path("goals/<int:goal_id>/", views.goal_edit, name="goal_edit"),
    path("goals/<int:goal_id>/delete/", views.goal_remove, name="goal_remove"),
    path("goals/<int:goal_id>/checkpoints/", views.goal_checkpoint_new, name="goal_checkpoint_new"),
    path("goal-checkpoints/<int:checkpoint_id>/", views.goal_checkpoint_edit, name="goal_checkpoint_edit"),
    path("decisions/<int:decision_id>/", views.decision_edit, name="decision_edit"),
    path("snapshots/<int:snapshot_id>/restore/", views.snapshot_restore_page, name="snapshot_restore"),
]
