"""Compression, the front door: what the rest of the app may call. Its insides are ``schedule``
(in the background, retried by itself), ``run`` (the run), ``summaries`` (what the model is asked
for), ``retry`` (the backoff) and ``wait`` (the one wait for a run); no module outside the package
imports them (pyproject.toml's import contracts)."""

from chat.services.compression.retry import compression_retry_pending
from chat.services.compression.run import CompressionOutcome, compression_run, session_effective_limits
from chat.services.compression.schedule import (
    compression_attempt,
    compression_maybe_schedule,
    compression_queued,
    compression_schedule,
)
from chat.services.compression.wait import (
    compression_failure_since,
    compression_running,
    compression_wait,
    compression_wait_blocking,
)

__all__ = [
    "CompressionOutcome",
    "compression_attempt",
    "compression_failure_since",
    "compression_maybe_schedule",
    "compression_queued",
    "compression_retry_pending",
    "compression_run",
    "compression_running",
    "compression_schedule",
    "compression_wait",
    "compression_wait_blocking",
    "session_effective_limits",
]
