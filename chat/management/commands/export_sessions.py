from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from chat.export import session_file
from chat.models import Session


class Command(BaseCommand):
    help = "Write one OLLM session file ({sessionId}.json, full uncompressed history) per session."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dir", default="~/.ollm/sessions", help="Folder to write to (created if missing).")
        parser.add_argument("--user", help="Only this user's sessions.")

    def handle(self, *args: Any, **options: Any) -> None:
        folder = Path(options["dir"]).expanduser()
        folder.mkdir(parents=True, exist_ok=True)
        sessions = Session.objects.order_by("created_at")
        if options["user"]:
            sessions = sessions.filter(owner__username=options["user"])
        count = 0
        for session in sessions:
            path = folder / f"{session.id}.json"
            path.write_text(json.dumps(session_file(session=session), ensure_ascii=False, indent=2), encoding="utf-8")
            count += 1
        self.stdout.write(f"Wrote {count} session file(s) to {folder}")
