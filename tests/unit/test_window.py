from __future__ import annotations

from engine.core.aging import Level
from engine.core.window import (
    ActiveMessage,
    CheckpointView,
    PromptCall,
    PromptMessage,
    assemble_window,
    chat_messages,
    prompt_messages,
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


def test_stored_tool_calls_go_on_the_assistant_message_and_their_results_follow_them():
    blocks = assemble_window(
        system="S",
        system_tokens=1,
        checkpoints=[],
        messages=[
            ActiveMessage(1, "user", "Time and date?", 4),
            ActiveMessage(2, "assistant", "Let me look.", 3),
            ActiveMessage(3, "tool", "12:00", 2, "c1", "get_time", {"zone": "UTC"}),
            ActiveMessage(4, "tool", "", 2, "c2", "get_date", {}),  # called, no result yet
            ActiveMessage(5, "user", "And the weather?", 4),
            ActiveMessage(6, "tool", "rain", 2, "c3", "weather", {}),
            ActiveMessage(7, "tool", "an imported result", 2),  # names no tool: a message as it was
            ActiveMessage(8, "assistant", "It rains.", 3),
        ],
    )
    assert prompt_messages(blocks) == [
        PromptMessage("system", "S"),
        PromptMessage("user", "Time and date?"),
        PromptMessage(
            "assistant",
            "Let me look.",
            (PromptCall("c1", "get_time", {"zone": "UTC"}), PromptCall("c2", "get_date", {})),
        ),
        PromptMessage("tool", "12:00", tool_call_id="c1", tool_name="get_time"),
        PromptMessage("user", "And the weather?"),
        PromptMessage("assistant", "", (PromptCall("c3", "weather", {}),)),
        PromptMessage("tool", "rain", tool_call_id="c3", tool_name="weather"),
        PromptMessage("tool", "an imported result"),
        PromptMessage("assistant", "It rains."),
    ]
    # Without tool calls, the same pairs as chat_messages.
    plain = [b for b in blocks if b.role != "tool"]
    assert [(m.role, m.content) for m in prompt_messages(plain)] == chat_messages(plain)
    ending = assemble_window(
        system="", system_tokens=0, checkpoints=[], messages=[ActiveMessage(3, "tool", "1", 1, "c", "f", {})]
    )
    assert prompt_messages(ending) == [
        PromptMessage("assistant", "", (PromptCall("c", "f", {}),)),
        PromptMessage("tool", "1", tool_call_id="c", tool_name="f"),
    ]
