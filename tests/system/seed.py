"""Test data for the system tests, written through the app's own services in a process of its own
(``python -m tests.system.seed '<json>'`` with the stack's environment); prints one JSON line.

``{"user": NAME, "password": PW}`` creates a user; ``{"session": {...}}`` creates a session owned by
``owner`` with ``pairs`` question/answer pairs already stored (enough of them make it due; ``{index}`` in
``question`` or ``answer`` is the pair's number; ``parameter_size_b`` the model's size); ``count`` makes
that many alike.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def main(argv: list[str]) -> dict[str, Any]:
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from chat.services.messages import message_create
    from chat.services.sessions import session_create

    order = json.loads(argv[1])
    if "user" in order:
        get_user_model().objects.create_user(order["user"], password=order["password"])
        return {"user": order["user"]}
    spec = order["session"]
    ids = []
    for _ in range(spec.get("count", 1)):
        session = session_create(
            owner=get_user_model().objects.get(username=spec["owner"]),
            model=spec["model"],
            context_size=spec["context_size"],
            title=spec.get("title", ""),
            system_prompt=spec.get("system_prompt", "Be brief."),
            settings=spec.get("settings"),
            parameter_size_b=spec.get("parameter_size_b"),
        )
        question = spec.get("question", "Question {index} about logins?")
        answer = spec.get("answer", "")
        for index in range(spec.get("pairs", 0)):
            message_create(session=session, role="user", content=question.replace("{index}", str(index)))
            message_create(session=session, role="assistant", content=answer.replace("{index}", str(index)))
        ids.append(str(session.pk))
    return {"id": ids[0], "ids": ids}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv)))
