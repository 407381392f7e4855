"""Fixtures of the spec conformance suite.

Compressions are driven through the Ollama stand-in (real HTTP, the official client, the gateway's
error mapping; the ``gateway`` fixture of tests/conftest.py), mostly with a canned summary so that
no test waits for the model, of a model that is asked for summaries (a small one is asked for none).
The helpers (``small_session``, ``converse``, ``until_due``, ...) are in tests/factories.py.
"""

from __future__ import annotations

import pytest

from tests.factories import WRITER_SIZE_B, small_session, until_due


@pytest.fixture(scope="session", autouse=True)
def _app_model_server(app_model_server):
    """Every test here: the app's own gateway reaches the tests' model server."""
    return app_model_server


@pytest.fixture
def due_session(user):
    """A Tier 3 session whose active conversation has just reached the trigger; its model is one the spec's
    summaries are asked of (``WRITER_SIZE_B``): a small one (the served 135M) is asked for none, its extract
    stands (tests/integration/test_compression.py)."""
    session = small_session(user, parameter_size_b=WRITER_SIZE_B)
    until_due(session)
    return session
