from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from chat.models import Message, Session
from chat.services.files import session_archive, session_file, sessions_zip
from search.models import SearchDocument
from search.selectors import SearchFilters, sessions_matching


class Command(BaseCommand):
    help = (
        "Write one OLLM session file ({sessionId}.json, full uncompressed history) per session, or one zip of "
        "them; the search page's filters select which sessions (--query: those with a match)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dir", default="~/.ollm/sessions", help="Folder to write to (created if missing).")
        parser.add_argument("--zip", help="Write one zip file here instead of a folder of files.")
        parser.add_argument(
            "--archive",
            action="store_true",
            help="Write each session's whole archive ({sessionId}.archive.json: the session file plus checkpoints, "
            "goals, decisions, artifacts, snapshots, events and settings), which the import rebuilds identically.",
        )
        parser.add_argument("--user", help="Only this user's sessions.")
        parser.add_argument("--query", default="", help="Only sessions with a match for this search.")
        parser.add_argument("--model", default="", help="Only sessions with this model.")
        parser.add_argument("--since", type=date.fromisoformat, help="YYYY-MM-DD: matches (or activity) from then.")
        parser.add_argument("--until", type=date.fromisoformat, help="YYYY-MM-DD: matches (or a start) until then.")
        parser.add_argument(
            "--role", default="", choices=["", *Message.Role.values], help="With --query: messages of this role."
        )
        parser.add_argument(
            "--kind", default="", choices=["", *SearchDocument.Kind.values], help="With --query: only this kind."
        )
        parser.add_argument("--locked", action="store_true", help="With --query: only locked decisions.")

    def handle(self, *args: Any, **options: Any) -> None:
        filters = SearchFilters(
            model=options["model"],
            since=options["since"],
            until=options["until"],
            role=options["role"],
            kind=options["kind"],
            locked_only=options["locked"],
        )
        owner: Any = None
        if options["user"]:
            owner = get_user_model().objects.filter(username=options["user"]).first()
            if owner is None:
                raise CommandError(f"There is no user {options['user']!r}.")
        sessions: list[Session] = list(sessions_matching(user=owner, query=options["query"], filters=filters))
        if options["archive"]:
            if options["zip"]:
                raise CommandError("--archive writes a folder of files; it cannot be combined with --zip.")
            folder = Path(options["dir"]).expanduser()
            folder.mkdir(parents=True, exist_ok=True)
            for session in sessions:
                path = folder / f"{session.id}.archive.json"
                path.write_text(json.dumps(session_archive(session=session), ensure_ascii=False), encoding="utf-8")
            self.stdout.write(f"Wrote {len(sessions)} session archive(s) to {folder}")
            return
        if options["zip"]:
            target = Path(options["zip"]).expanduser()
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(sessions_zip(sessions=sessions))
            self.stdout.write(f"Wrote {len(sessions)} session file(s) to {target}")
            return
        folder = Path(options["dir"]).expanduser()
        folder.mkdir(parents=True, exist_ok=True)
        for session in sessions:
            path = folder / f"{session.id}.json"
            path.write_text(json.dumps(session_file(session=session), ensure_ascii=False, indent=2), encoding="utf-8")
        self.stdout.write(f"Wrote {len(sessions)} session file(s) to {folder}")
