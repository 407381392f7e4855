"""The turn is one synchronous core (issue 48, item 3): no ``sync_to_async`` hop is left in it, the REST
API and the drop-in answers that do not stream call it directly (no ``async_to_sync`` around an async
turn), and no entry point reads the ORM to reconcile a turn's outcome."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TURN = ROOT / "chat" / "services" / "turn"
# The core and what it runs on; the shell (``shell.py``) is the one async door of the package.
CORE = ("take.py", "variants.py", "room.py", "driver.py")


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def _names(node: ast.AST) -> set[str]:
    """Every name and attribute used or imported under ``node``."""
    found: set[str] = set()
    for child in ast.walk(node):
        if isinstance(child, ast.Name):
            found.add(child.id)
        elif isinstance(child, ast.Attribute):
            found.add(child.attr)
        elif isinstance(child, ast.alias):
            found.add(child.asname or child.name)
    return found


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            return node
    raise AssertionError(f"no function {name}")


def test_the_turn_core_has_no_sync_to_async() -> None:
    for module in CORE:
        names = _names(_tree(TURN / module))
        assert "sync_to_async" not in names, module
        assert "async_to_sync" not in names, module


def test_the_turn_core_is_synchronous() -> None:
    assert isinstance(_function(_tree(TURN / "take.py"), "turn_run"), ast.FunctionDef)
    variants = _tree(TURN / "variants.py")
    for variant in ("TurnSend", "TurnRetry", "TurnRegenerate", "TurnEdit", "TurnContinue", "TurnToolResults"):
        cls = next(n for n in variants.body if isinstance(n, ast.ClassDef) and n.name == variant)
        assert isinstance(_function(ast.Module(body=[cls], type_ignores=[]), "message"), ast.FunctionDef), variant


def test_the_rest_send_calls_the_core_and_reconciles_nothing() -> None:
    sessions = _tree(ROOT / "chat" / "api" / "sessions.py")
    assert "async_to_sync" not in _names(sessions)
    send = _names(_function(sessions, "message_send"))
    assert "turn_run" in send
    assert not send & {"turn_take", "refresh_from_db", "in_bulk", "objects", "session_context", "compression_wait"}


def test_the_drop_in_answers_that_do_not_stream_call_the_core() -> None:
    conversations = _tree(ROOT / "chat" / "services" / "conversations.py")
    answer = _function(conversations, "conversation_answer")
    assert isinstance(answer, ast.FunctionDef)
    assert "turn_run" in _names(answer)
    assert not _names(answer) & {"sync_to_async", "async_to_sync"}
    common = _tree(ROOT / "chat" / "dropin" / "common.py")
    assert "conversation_answer" in _names(_function(common, "reply_for"))


def test_the_terminal_chat_calls_the_core() -> None:
    names = _names(_tree(ROOT / "chat" / "management" / "commands" / "chat.py"))
    assert "turn_run" in names
    assert not names & {"turn_take", "async_to_sync"}
