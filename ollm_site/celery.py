from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ollm_site.settings")

app = Celery("ollm_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
