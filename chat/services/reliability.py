from __future__ import annotations

from chat.models import Session
from chat.selectors.context import session_reliability


def session_refresh_reliability(*, session: Session) -> float:
    """Store the session's reliability score after any of its inputs changed.

    Call inside the transaction that changed the compression count, the
    active checkpoints or the model.
    """
    score = session_reliability(session=session).score
    Session.objects.filter(pk=session.pk).update(reliability_score=score)
    session.reliability_score = score
    return score
