"""Three people chatting at once at 2K on the default setup (a live server, the bundled model server,
compressions in the server's own threads), each asking for long answers: no compression fails, no
context holds more than the model's context, every turn is answered. Timings are bench/load.py's.

The 2K selection is squeezed to 1,000 tokens: a reply's cap is 15% of the window, so a conversation
reaches its trigger in as many turns as at 1,700 tokens, with shorter replies to generate."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.llm.embedded import MODEL_NAME
from tests.support.live_server import serve
from tests.support.load import load_run, users_with_tokens
from tests.support.model_server import ModelServerProcess

pytestmark = pytest.mark.long_model

CLIENTS = 3
TURNS = 6
SQUEEZED = {MODEL_NAME: {"2048": 1000}}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, model_server: ModelServerProcess) -> Iterator[tuple[str, Path]]:
    model_server.reset()
    work = tmp_path_factory.mktemp("load")
    env = {"OLLM_MODEL_CONTEXT_OVERRIDES": json.dumps(SQUEEZED)}
    with serve(work, model_server, with_user=False, reply_max_tokens=None, env=env) as url:
        yield url, work


def test_three_clients_at_2k_lose_nothing(live, model_server):
    url, work = live
    tokens = users_with_tokens(work, model_server, CLIENTS)
    run = load_run(url, tokens, turns=TURNS, model=MODEL_NAME, context_size=2048)

    assert [f for c in run.clients for f in c.failures] == []
    assert [o for c in run.clients for o in c.over_budget] == []
    assert [e for c in run.clients for e in c.errors] == []
    assert len(run.turn_seconds) == CLIENTS * TURNS
    # Long answers fill 2K within a few turns: compressions ran, under load, and held.
    assert run.compressions >= CLIENTS
