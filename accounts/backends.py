"""Staff review conversations: the admin's view permissions on them come with ``is_staff``.

The admin is where staff review sessions (docs/user-guide.md). Django gives a staff account no
permission of its own, so a staff member made in the admin saw "You don't have permission to view
or edit anything". This backend grants every active staff account the view permission of each model
of the conversation apps, and nothing else: no add, change or delete (the admin's classes refuse
those anyway), nothing of other apps (users, groups, tokens stay with superusers).
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.contrib.auth.backends import BaseBackend

# The conversation domain's models are all chat's (contextmgr keeps only the history of their migrations).
REVIEWED_APPS = ("chat",)


def review_permissions() -> set[str]:
    """``<app>.view_<model>`` for every model of the reviewed apps, as the registry holds them now."""
    return {
        f"{label}.view_{model._meta.model_name}"
        for label in REVIEWED_APPS
        for model in apps.get_app_config(label).get_models()
    }


def _reviews(user: Any) -> bool:
    return bool(getattr(user, "is_active", False) and getattr(user, "is_staff", False))


class StaffReviewBackend(BaseBackend):
    """Answers permission questions only; it authenticates nobody (``authenticate`` returns ``None``)."""

    def get_all_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        return review_permissions() if _reviews(user_obj) and obj is None else set()

    def has_perm(self, user_obj: Any, perm: str, obj: Any = None) -> bool:
        return perm in self.get_all_permissions(user_obj, obj)

    def has_module_perms(self, user_obj: Any, app_label: str) -> bool:
        return _reviews(user_obj) and app_label in REVIEWED_APPS
