"""Staff review conversations: the admin's view permissions on them come with ``is_staff``.

The admin is where staff review sessions (docs/user-guide.md). Django gives a staff account no
permission of its own, so a staff member made in the admin saw "You don't have permission to view
or edit anything". This backend grants every active staff account the view permission of each model
of the conversation apps, and nothing else: no add, change or delete (the admin's classes refuse
those anyway), nothing of other apps (users, groups, tokens stay with superusers).

It also holds the login throttle's counting (``LoginThrottle``, django-axes' ``AXES_HANDLER``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from axes.handlers.database import AxesDatabaseHandler
from django.apps import apps
from django.conf import settings
from django.contrib.auth.backends import BaseBackend
from django.db.models import Max, Sum
from django.http import HttpRequest

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


class LoginThrottle(AxesDatabaseHandler):  # type: ignore[misc]  # axes ships no type hints
    """django-axes' database handler, counting failures so that an attacker cannot lock others out.

    Failures count per username and client address (``AXES_LOCKOUT_PARAMETERS``' first set): behind a
    reverse proxy every user shares one address, so a stranger failing for made-up usernames must not
    lock the address for accounts it has not failed against. They also count per username across
    addresses (the second set), to a higher limit (``OLLM_LOGIN_USERNAME_FAILURE_LIMIT``), so that guessing
    one password from many addresses still stops. Axes compares one count with one limit: ``get_failures``
    reports a username over its own limit as the pair limit reached.
    """

    def lock_counts(self, request: HttpRequest, credentials: dict[str, Any] | None) -> list[LockCount]:
        """Each count that may lock this login: its failures, the last one's time, and its limit."""
        limits = (settings.AXES_FAILURE_LIMIT, settings.OLLM_LOGIN_USERNAME_FAILURE_LIMIT)
        counts = []
        for attempts, limit in zip(self.get_user_attempts(request, credentials), limits, strict=False):
            totals = attempts.aggregate(failures=Sum("failures_since_start"), last=Max("attempt_time"))
            counts.append(LockCount(totals["failures"] or 0, totals["last"], limit))
        return counts

    def get_failures(self, request: HttpRequest, credentials: dict[str, Any] | None = None) -> int:
        counts = self.lock_counts(request, credentials)
        if any(count.locks for count in counts):
            return max(settings.AXES_FAILURE_LIMIT, counts[0].failures if counts else 0)
        return counts[0].failures if counts else 0


@dataclass(frozen=True)
class LockCount:
    failures: int
    last: datetime | None
    limit: int

    @property
    def locks(self) -> bool:
        return self.failures >= self.limit and self.last is not None
