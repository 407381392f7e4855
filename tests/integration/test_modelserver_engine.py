"""The bundled model server's engine, in this process: exact tokens, one generation per slot, turns
sharing the turn slots, and chat turns before background work."""

from __future__ import annotations

import threading
from contextlib import contextmanager

import pytest

from modelserver.engine import TOKENIZED_PROMPTS_KEPT, Engine, EngineError, Message, Result, bundled_model_path
from tests.support.model_server import TEST_SEED

LONG = [Message("user", "Count from 1 to 300, separated by commas.")]


@pytest.fixture(scope="module")
def engine():
    loaded = Engine(n_ctx=1024, n_threads=2, seed=TEST_SEED, turn_slots=2)
    yield loaded
    loaded.close()


def run(engine: Engine, messages, **options) -> tuple[str, Result]:
    parts = list(engine.generate(messages, num_ctx=1024, temperature=0.0, **options))
    result = parts[-1]
    assert isinstance(result, Result)
    return "".join(p for p in parts[:-1] if isinstance(p, str)), result


def test_the_engine_sends_the_tokens_llama_cpp_makes_of_the_prompt_text(engine):
    """The prompt goes to llama.cpp as tokens, tokenized once: they must be the ones it builds from the text."""
    prompt, _ = engine.prompt_for([Message("system", "Be brief."), *LONG])
    tokens = engine.prompt_tokens(prompt)
    # llama.cpp's server given the prompt as text: the tokens it evaluates, and what they read back as.
    as_text = engine._server.handle_completions({"prompt": prompt, "max_tokens": 1, "temperature": 0.0})
    assert as_text["usage"]["prompt_tokens"] == len(tokens)
    assert engine._call("POST", "/detokenize", {"tokens": list(tokens)})["content"] == prompt
    assert engine.prompt_tokens(prompt) is tokens, "a prompt counted once is not tokenized again"


def test_a_prompt_counted_then_sent_is_templated_once(engine, monkeypatch):
    """The app counts a prompt, then sends it: the second time the template's text is remembered."""
    calls = []
    original = engine._call

    def call(method, path, body=None):
        calls.append(path)
        return original(method, path, body)

    monkeypatch.setattr(engine, "_call", call)
    messages = [Message("system", "Be brief."), *LONG, Message("user", "templated once")]
    counted = engine.count_prompt(messages)
    _, result = run(engine, messages, max_tokens=1)
    assert result.prompt_tokens == counted
    assert calls.count("/apply-template") == 1


def test_the_engine_remembers_only_the_last_few_prompts(engine):
    first = engine.prompt_tokens("prompt 0")
    for n in range(1, TOKENIZED_PROMPTS_KEPT + 1):
        engine.prompt_tokens(f"prompt {n}")
    again = engine.prompt_tokens("prompt 0")
    assert again == first
    assert again is not first
    assert len(engine._tokenized) == TOKENIZED_PROMPTS_KEPT


def test_the_count_is_what_generation_evaluates(engine):
    _, result = run(engine, LONG, max_tokens=2)
    assert result.prompt_tokens == engine.count_prompt(LONG)


def taking(engine: Engine, monkeypatch) -> tuple[list[int], list[int]]:
    """Records the turn slot each generation takes, and how many are taken at once."""
    pool = engine._slots["interactive"]
    original = pool.take
    taken: list[int] = []
    at_once = [0, 0]  # now, most

    @contextmanager
    def take(tokens):
        with original(tokens) as context:
            taken.append(context.slot)
            at_once[0] += 1
            at_once[1] = max(at_once)
            try:
                yield context
            finally:
                at_once[0] -= 1

    monkeypatch.setattr(pool, "take", take)
    return taken, at_once


def test_turns_share_the_turn_slots_and_never_one_slot(engine, monkeypatch):
    """Three turns at once on two turn slots: two generate together (one batch), the third waits, and
    each slot serves one generation at a time; every reply is whole."""
    taken, at_once = taking(engine, monkeypatch)
    texts: list[str] = []
    threads = [
        threading.Thread(target=lambda n=n: texts.append(run(engine, [Message("user", f"Name {n}.")], max_tokens=6)[0]))
        for n in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(texts) == 3
    assert all(texts)
    assert sorted(set(taken)) == [0, 1]
    assert at_once[1] == 2


def test_a_returning_conversation_gets_the_slot_that_holds_its_prefix(engine, monkeypatch):
    """Alice, then Bob, then Alice again: Bob does not overwrite Alice's cached prompt (he takes the slot
    used least recently), and Alice's next turn goes back to the slot that holds hers."""
    taken, _ = taking(engine, monkeypatch)
    alice = [Message("system", "You help Alice plan a garden in Lisbon. " * 6), Message("user", "Which herbs?")]
    bob = [Message("system", "You help Bob fix a bicycle in Oslo. " * 6), Message("user", "Which tyre?")]
    first, _ = run(engine, alice, max_tokens=4)
    run(engine, bob, max_tokens=4)
    run(engine, [*alice, Message("assistant", first), Message("user", "And flowers?")], max_tokens=4)
    assert taken[1] != taken[0]
    assert taken[2] == taken[0]


def test_a_regenerate_after_a_long_reply_reads_its_prompt_from_the_slot_that_holds_it(engine, monkeypatch):
    """A short prompt whose reply was long fills under half its slot's cache, yet the whole prompt is there:
    asked again (Regenerate), it goes back to that slot rather than reading the prompt from scratch."""
    taken, _ = taking(engine, monkeypatch)
    short = [Message("user", "List ten facts about cats.")]
    _, first = run(engine, short, max_tokens=120)
    assert first.completion_tokens > first.prompt_tokens, "the reply fills most of the slot's cache"
    run(engine, short, max_tokens=4)
    assert taken[1] == taken[0], "the least recently used slot, which holds nothing of it, was taken"


def test_background_work_waits_while_a_turn_is_in_flight(engine, monkeypatch):
    """A summary in progress makes no progress while a turn is generating: the turn has the CPU."""
    # Within its bound (the next test's subject), whatever the turn takes on a machine others load.
    monkeypatch.setattr(engine, "background_max_wait", 600.0)
    background_tokens = 0
    turn_started = threading.Event()
    during_turn: list[int] = []
    summary = engine.generate(LONG, num_ctx=1024, max_tokens=300, temperature=0.0, priority="background")

    def summarize() -> None:
        nonlocal background_tokens
        for part in summary:
            if isinstance(part, str):
                background_tokens += 1
                if background_tokens == 5:
                    turn_started.wait()

    worker = threading.Thread(target=summarize)
    worker.start()
    with engine.gate.turn():
        turn_started.set()
        before = background_tokens
        _, result = run(engine, [Message("user", "Say hello.")], max_tokens=20)
        during_turn.append(background_tokens - before)
    worker.join()
    assert result.completion_tokens > 0
    # At most the token whose evaluation had already begun when the turn arrived.
    assert during_turn[0] <= 1
    assert background_tokens > 5, "the summary went on after the turn"


def test_a_missing_model_package_is_named(monkeypatch):
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(EngineError, match="the bundled model is not installed"):
        bundled_model_path()


def test_background_work_pauses_for_turns_at_most_its_bound(engine):
    """A turn that holds the CPU for long does not starve a summary: past its bound it goes on beside it."""
    bound, engine.background_max_wait = engine.background_max_wait, 0.5
    produced = threading.Event()
    summary = engine.generate(LONG, num_ctx=1024, max_tokens=40, temperature=0.0, priority="background")

    def summarize() -> None:
        for part in summary:
            if isinstance(part, str):
                produced.set()

    try:
        with engine.gate.turn():  # a turn in flight all along
            worker = threading.Thread(target=summarize)
            worker.start()
            assert produced.wait(timeout=60), "the summary waited for the turn past its bound"
        worker.join()
    finally:
        engine.background_max_wait = bound


def test_a_prompt_ending_with_the_assistants_message_continues_it(engine):
    """As Ollama's: the reply is not closed and no new assistant turn is opened after it."""
    question = [Message("user", "Count from 1 to 10, separated by commas.")]
    started, _ = engine.prompt_for([*question, Message("assistant", "1, 2, 3,")])
    fresh, _ = engine.prompt_for(question)
    assert started.endswith("1, 2, 3,")
    assert started.startswith(fresh)
    text, _ = run(engine, [*question, Message("assistant", "1, 2, 3,")], max_tokens=8)
    assert text.lstrip().startswith("4")


@pytest.mark.parametrize("priority", ["interactive", "background"])
def test_a_returning_conversation_does_not_evaluate_its_prefix_again(engine, monkeypatch, priority):
    """Each slot keeps the prompt it last evaluated (llama.cpp's ``cache_prompt``): the next turn of the same
    conversation evaluates only what is new, for a turn as for background work."""
    evaluated: list[int] = []
    server = engine._server

    class Recording:
        def handle_completions(self, body, callback):
            def record(chunk):
                if chunk.get("timings"):
                    evaluated.append(chunk["timings"]["prompt_n"])
                return callback(chunk)

            return server.handle_completions(body, record)

    monkeypatch.setattr(engine, "_server", Recording())
    first = [Message("system", f"Be brief ({priority}). " * 40), Message("user", "Name a colour.")]
    _, before = run(engine, first, max_tokens=4, priority=priority)
    assert evaluated, "the recording saw the generation"
    evaluated.clear()
    _, after = run(
        engine, [*first, Message("assistant", "Blue."), Message("user", "Another.")], max_tokens=4, priority=priority
    )
    assert sum(evaluated) <= after.prompt_tokens - before.prompt_tokens + 1, evaluated
