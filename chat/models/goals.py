"""Goals with their checkpoints, decisions and artifacts."""

from __future__ import annotations

from django.db import models

MAX_GOAL_CHARS = 2000
MAX_PATH_CHARS = 1000


class Goal(models.Model):
    class Priority(models.TextChoices):
        HIGH = "high"
        MEDIUM = "medium"
        LOW = "low"

    class Status(models.TextChoices):
        ACTIVE = "active"
        PAUSED = "paused"
        COMPLETED = "completed"

    session = models.ForeignKey("chat.Session", on_delete=models.CASCADE, related_name="goals")
    description = models.TextField(max_length=MAX_GOAL_CHARS)
    priority = models.CharField(max_length=8, choices=Priority.choices, default=Priority.MEDIUM)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.ACTIVE)
    next_step = models.TextField(blank=True, max_length=MAX_GOAL_CHARS)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "contextmgr_goal"  # kept from the contextmgr app (issue 33)
        ordering = ["session", "created_at"]

    def __str__(self) -> str:
        return self.description[:80]


class GoalCheckpoint(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        IN_PROGRESS = "in-progress"
        COMPLETED = "completed"

    goal = models.ForeignKey(Goal, on_delete=models.CASCADE, related_name="checkpoints")
    description = models.TextField(max_length=MAX_GOAL_CHARS)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "contextmgr_goalcheckpoint"  # kept from the contextmgr app (issue 33)
        ordering = ["goal", "id"]

    def __str__(self) -> str:
        return self.description[:80]


class Decision(models.Model):
    session = models.ForeignKey("chat.Session", on_delete=models.CASCADE, related_name="decisions")
    goal = models.ForeignKey(Goal, null=True, blank=True, on_delete=models.SET_NULL, related_name="decisions")
    description = models.TextField(max_length=MAX_GOAL_CHARS)
    locked = models.BooleanField(default=False, help_text="Locked decisions are never compressed or edited by markers.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "contextmgr_decision"  # kept from the contextmgr app (issue 33)
        ordering = ["session", "id"]

    def __str__(self) -> str:
        return ("[locked] " if self.locked else "") + self.description[:80]


class Artifact(models.Model):
    class Action(models.TextChoices):
        CREATED = "created"
        MODIFIED = "modified"
        ATTACHED = "attached"  # a text file the user attached to a message (issue 47, item 9)

    session = models.ForeignKey("chat.Session", on_delete=models.CASCADE, related_name="artifacts")
    goal = models.ForeignKey(Goal, null=True, blank=True, on_delete=models.SET_NULL, related_name="artifacts")
    path = models.CharField(max_length=MAX_PATH_CHARS)
    action = models.CharField(max_length=12, choices=Action.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "contextmgr_artifact"  # kept from the contextmgr app (issue 33)
        ordering = ["session", "id"]

    def __str__(self) -> str:
        return f"{self.action} {self.path}"
