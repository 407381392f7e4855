"""What ends a login beyond its own browser's next request: a logout, a password change, a deactivation. Each
tells the user's open chat sockets at once (``chat.services.events.user_sockets_recheck``), whatever changed the
account: a page, the admin, ``changepassword`` or code that saves the user."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import post_save, pre_save
from django.http import HttpRequest

from chat.services.events import user_sockets_recheck

# The fields whose change can end the user's logins.
LOGIN_FIELDS = frozenset({"password", "is_active"})
# Set on a user being saved whose login ends with the save.
_ENDS_LOGIN = "_ollm_ends_login"


def _logged_out(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    if user is None:
        return
    session = getattr(request, "session", None)
    user_sockets_recheck(user_id=user.pk, logged_out_session=getattr(session, "session_key", None))


def _before_save(sender: Any, instance: Any, update_fields: Any = None, **kwargs: Any) -> None:
    if instance.pk is None or (update_fields is not None and not LOGIN_FIELDS & set(update_fields)):
        return
    stored = sender._default_manager.filter(pk=instance.pk).values("password", "is_active").first()
    ends = stored is not None and (
        stored["password"] != instance.password or (stored["is_active"] and not instance.is_active)
    )
    setattr(instance, _ENDS_LOGIN, ends)


def _after_save(sender: Any, instance: Any, **kwargs: Any) -> None:
    if getattr(instance, _ENDS_LOGIN, False):
        setattr(instance, _ENDS_LOGIN, False)
        user_id = instance.pk
        # Once the change is committed, so that a socket checking its session reads it.
        transaction.on_commit(lambda: user_sockets_recheck(user_id=user_id))


def connect() -> None:
    """Called once, when the chat app is ready."""
    user_model = get_user_model()
    user_logged_out.connect(_logged_out, dispatch_uid="ollm-logged-out")
    pre_save.connect(_before_save, sender=user_model, dispatch_uid="ollm-login-before-save")
    post_save.connect(_after_save, sender=user_model, dispatch_uid="ollm-login-after-save")
