from __future__ import annotations

from contextmgr.core.aging import Level
from contextmgr.core.window import (
    ActiveMessage,
    CheckpointView,
    assemble_window,
    chat_messages,
    render_checkpoint,
    render_system,
    window_budget,
)


def test_checkpoint_rendering_keeps_its_structured_fields():
    full = CheckpointView(3, Level.OLD, "Messages 10-20", "We built login.", ("Use JWT",), ("a.ts", "b.ts"), ("Tests",))
    assert render_checkpoint(full) == (
        "[Checkpoint 3 · Messages 10-20 · old]\nWe built login.\nDecisions: Use JWT\nFiles: a.ts, b.ts\nNext: Tests"
    )
    assert render_checkpoint(CheckpointView(1, Level.ULTRA, "Messages 1-9", "Gist.")) == (
        "[Checkpoint 1 · Messages 1-9 · ultra]\nGist."
    )


def test_system_text_skips_empty_parts():
    assert render_system("  Be brief. ", "ACTIVE GOAL: x") == "Be brief.\n\nACTIVE GOAL: x"
    assert render_system("", "ACTIVE GOAL: x") == "ACTIVE GOAL: x"
    assert render_system("Be brief.", "") == "Be brief."


def test_blocks_in_prompt_order_and_the_messages_sent():
    blocks = assemble_window(
        system="Be brief.",
        system_tokens=3,
        checkpoints=[(7, "[Checkpoint 1]\nold", 6), (8, "[Checkpoint 2]\nnewer", 6)],
        messages=[ActiveMessage(1, "user", "hi", 5), ActiveMessage(4, "assistant", "hello", 5)],
    )
    assert [(b.kind, b.ref, b.tokens) for b in blocks] == [
        ("system", None, 3),
        ("checkpoint", 7, 6),
        ("checkpoint", 8, 6),
        ("message", 1, 5),
        ("message", 4, 5),
    ]
    assert chat_messages(blocks) == [
        ("system", "Be brief.\n\n[Checkpoint 1]\nold\n\n[Checkpoint 2]\nnewer"),
        ("user", "hi"),
        ("assistant", "hello"),
    ]


def test_an_empty_system_prompt_sends_no_system_message():
    blocks = assemble_window(system="", system_tokens=0, checkpoints=[], messages=[ActiveMessage(1, "user", "hi", 5)])
    assert chat_messages(blocks) == [("user", "hi")]


def test_the_window_counts_its_own_budget():
    blocks = assemble_window(
        system="Be brief.\n\nACTIVE GOAL: ship",
        system_tokens=9,
        checkpoints=[(7, "[Checkpoint 1]\nold", 6), (8, "[Checkpoint 2]\nnewer", 11)],
        messages=[ActiveMessage(1, "user", "hi", 5), ActiveMessage(4, "assistant", "hello", 7)],
    )
    budget = window_budget(blocks, max_tokens=100)
    assert (budget.system_prompt_tokens, budget.checkpoint_tokens, budget.active_tokens) == (9, 17, 12)
    assert (budget.max_tokens, budget.used, budget.available) == (100, 38, 74)
