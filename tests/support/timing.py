"""Waits that hold on a busy machine: on a condition, with timeouts that scale.

CI shares its 2 cores with other work. A test waits for a condition, never for a
fixed time; the timeouts that remain are generous and multiplied by
``OLLM_TEST_TIMEOUT_SCALE`` (default 1), which a slower machine may raise.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

TIMEOUT_SCALE = float(os.environ.get("OLLM_TEST_TIMEOUT_SCALE", "1"))


def scaled(seconds: float) -> float:
    return seconds * TIMEOUT_SCALE


def wait_until(condition: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.05) -> Any:
    """Poll ``condition`` until it is truthy and return its value; fail after ``timeout`` seconds, scaled."""
    deadline = time.monotonic() + scaled(timeout)
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {scaled(timeout):.0f} s waiting for {what}")
        time.sleep(interval)
