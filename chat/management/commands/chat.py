from __future__ import annotations

import sys
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.http import Http404

from chat.models import Session
from chat.selectors.context import session_context_line, session_events, session_last_event_id
from chat.selectors.sessions import backend_status, session_for_owner
from chat.services.compression import compression_wait_blocking
from chat.services.sessions import session_start
from chat.services.turn import TurnSend, turn_run
from engine.llm.types import LLMError


class Command(BaseCommand):
    help = "Chat in a terminal: one line of stdin per message; prints the streamed reply, the context line and events."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", required=True, help="Owner of the session.")
        parser.add_argument("--session", help="Continue this session (id); default: start a new one.")
        parser.add_argument("--model", help="Model of a new session (default: the backend's default).")
        parser.add_argument("--context-size", type=int, default=4096)
        parser.add_argument("--system", default="", help="System prompt of a new session.")

    def handle(self, *args: Any, **options: Any) -> None:
        owner = get_user_model().objects.filter(username=options["user"]).first()
        if owner is None:
            raise CommandError(f"There is no user {options['user']!r}.")
        if options["session"]:
            try:
                session = session_for_owner(user=owner, session_id=options["session"])
            except (Http404, ValidationError) as exc:  # ValidationError: not a session id at all
                raise CommandError(f"{options['user']} has no session {options['session']}.") from exc
        else:
            model = options["model"] or backend_status().default_model
            if model is None:
                raise CommandError("No model is available: start Ollama or install the embedded model.")
            try:
                session = session_start(
                    owner=owner,
                    model=model,
                    context_size=options["context_size"],
                    system_prompt=options["system"],
                    title="Terminal chat",
                )
            except ValidationError as exc:
                raise CommandError("; ".join(exc.messages)) from exc
        self.stdout.write(f"Session {session.id} ({session.model}, num_ctx {session.max_tokens:,})")
        seen = session_last_event_id(session=session)
        since = seen  # the newest event before the last turn

        def show(delta: str) -> None:
            self.stdout.write(delta, ending="")
            self.stdout.flush()

        for line in sys.stdin:
            text = line.rstrip("\n")
            if not text.strip():
                continue
            self.stdout.write(f"> {text}\n< ", ending="")
            since = seen
            try:
                outcome = turn_run(session_id=session.pk, variant=TurnSend(text), on_delta=show)
                cut = " [cut at the reply cap]" if outcome.cut_by_cap else ""
                exact = "exact" if outcome.prompt_exact else "estimated"
                self.stdout.write(f"{cut}\n  prompt {outcome.prompt_tokens:,} tokens ({exact})")
            except (LLMError, ValidationError) as exc:
                self.stdout.write(self.style.ERROR(f"\n  error: {exc}"))
            seen = self._report(session, seen)
        # Background compressions run in this process's threads: let the one the last turn made
        # due finish (it may not have started yet) before the process ends.
        wait = compression_wait_blocking
        if not wait(session_id=session.pk, timeout=0, after_event_id=since):
            self.stdout.write("  (waiting for the compression to finish)")
            wait(session_id=session.pk, timeout=settings.OLLM_COMPRESSION_WAIT_SECONDS, after_event_id=since)
            self._report(session, seen)

    def _report(self, session: Session, seen: int) -> int:
        """Print the context line and the events after ``seen``; returns the last event id."""
        session.refresh_from_db()
        self.stdout.write(f"  {session_context_line(session=session)}")
        for event in session_events(session=session, after=seen):
            self.stdout.write(f"  event {event.type}: {event.payload}")
            seen = event.id
        return seen
