from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Print what a fresh install needs next (its first account, an admin) and where the app listens."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000/")

    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model().objects
        if not users.exists():
            self.stdout.write(
                self.style.WARNING(
                    f"No account yet: open {options['url']} and create the first one, the administrator\n"
                    "(or, from a script: make admin, which runs manage.py createsuperuser).\n"
                    "Then `make seed` adds a demo session to review."
                )
            )
        elif not users.filter(is_superuser=True).exists():
            self.stdout.write(
                self.style.WARNING(
                    "No admin account yet. In another terminal, create one with:\n"
                    "    make admin        (runs: .venv/bin/python manage.py createsuperuser)\n"
                    "then log in. `make seed` adds a demo session to review."
                )
            )
        self.stdout.write(f"ollm-site is starting on {options['url']} (admin at {options['url']}admin/).")
