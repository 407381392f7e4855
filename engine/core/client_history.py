"""The history an outside client resends: what is new in a request, and which session it continues.

Clients of Ollama's and OpenAI's APIs keep the conversation themselves and send all of it on every
call. A session remembers a digest of the history its client has seen (the request's messages and
the reply it got); the next request whose earlier messages have that digest continues the session,
and its last message is the only new one. A request that could not be answered leaves the digest of
its messages without a reply (``pending_digest``): the same request repeated continues the session.
A client that edited or trimmed its history (Regenerate, Edit) sends earlier messages with another
digest: that is a branch of the session it shares the most of its history with (``shared_length``),
or a new conversation when it shares none; never a rewrite of the old one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# The roles a client's history may hold; a tool's result is kept as the session file keeps it.
CLIENT_ROLES = ("system", "user", "assistant", "tool")
TITLE_CHARS = 60


class ClientHistoryError(ValueError):
    """The request's messages are not a conversation this app can continue; the message says why."""


@dataclass(frozen=True)
class ClientToolCall:
    """A tool call an assistant message made: ``arguments`` as the client sent them (JSON text, or an object)."""

    id: str
    name: str
    arguments: Any


@dataclass(frozen=True)
class ClientMessage:
    """A message of the client's history; ``tool_calls`` an assistant's calls, ``tool_call_id`` and
    ``tool_name`` the call a tool message is the result of (OpenAI's clients send the id, Ollama's the name)."""

    role: str
    content: str
    tool_calls: tuple[ClientToolCall, ...] = ()
    tool_call_id: str = ""
    tool_name: str = ""

    def canonical(self) -> list[Any]:
        """What the digest reads of it: its tool fields only when it has them, so plain messages keep theirs."""
        plain: list[Any] = [self.role, self.content.strip()]
        if not (self.tool_calls or self.tool_call_id or self.tool_name):
            return plain
        # A call as both APIs send it back: OpenAI's arguments are JSON text, Ollama's an object, and
        # Ollama's clients drop the id the call was given.
        calls = [[c.name, json.dumps(_arguments(c.arguments), sort_keys=True)] for c in self.tool_calls]
        return [*plain, calls, self.tool_call_id, self.tool_name]


@dataclass(frozen=True)
class HistoryEntry:
    """A message of the client's history as a session stores it: a tool call with its result is one
    ``tool`` entry (the session file's ``toolCalls``), an assistant message only its text."""

    role: str
    content: str
    tool_call_id: str = ""
    tool_name: str = ""
    tool_args: Any = None


def history_entries(messages: Sequence[ClientMessage]) -> list[HistoryEntry]:
    """``messages`` as stored: each tool result with the call it answers (by id, else by name, else the
    earliest unanswered); a call with no result yet is stored as one without a result; an assistant message
    that only called tools leaves no message of its own."""
    entries: list[HistoryEntry] = []
    open_calls: list[ClientToolCall] = []
    for message in messages:
        if message.role == "tool":
            call = next((c for c in open_calls if message.tool_call_id and c.id == message.tool_call_id), None)
            call = call or next((c for c in open_calls if message.tool_name and c.name == message.tool_name), None)
            if call is None and open_calls and not (message.tool_call_id or message.tool_name):
                call = open_calls[0]
            if call is not None:
                open_calls.remove(call)
            entries.append(
                HistoryEntry(
                    "tool",
                    message.content,
                    call.id if call else message.tool_call_id,
                    call.name if call else message.tool_name,
                    _arguments(call.arguments) if call else None,
                )
            )
            continue
        entries += [HistoryEntry("tool", "", c.id, c.name, _arguments(c.arguments)) for c in open_calls]
        open_calls = list(message.tool_calls)
        if message.role != "assistant" or message.content.strip() or not message.tool_calls:
            entries.append(HistoryEntry(message.role, message.content))
    entries += [HistoryEntry("tool", "", c.id, c.name, _arguments(c.arguments)) for c in open_calls]
    return entries


def _arguments(value: Any) -> Any:
    """A call's arguments as a value: OpenAI sends them as JSON text, which may not parse."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


@dataclass(frozen=True)
class ClientRequest:
    """A request's messages, split: the system prompt, the earlier turns, the new user message.
    ``continues``: the request asks to continue the reply to ``new_message`` the client holds last
    (its "Continue response"), which this is; None for a new message."""

    system_prompt: str
    earlier: tuple[ClientMessage, ...]
    new_message: str
    continues: str | None = None
    # The results of the tool calls the client's last assistant message made: what the request adds
    # instead of a user message (``new_message`` is then empty), to be answered by the model.
    tool_results: tuple[ClientMessage, ...] = ()

    @property
    def added(self) -> tuple[ClientMessage, ...]:
        """What the request adds to the history the client held: its tool results, or the user's message."""
        return self.tool_results or (ClientMessage("user", self.new_message),)

    @property
    def history(self) -> tuple[ClientMessage, ...]:
        """What the client held before this request: the earlier turns, and the reply it continues."""
        if self.continues is None:
            return self.earlier
        return (*self.earlier, ClientMessage("user", self.new_message), ClientMessage("assistant", self.continues))

    @property
    def earlier_digest(self) -> str:
        """The digest a session has when this request continues it."""
        return history_digest(self.system_prompt, self.history)

    @property
    def pending_digest(self) -> str:
        """The digest of the history with the new message and no reply: a session that has it stored
        the message and could not answer it; this request repeated continues it. A continued reply
        leaves nothing pending: the stored reply stays as it was until the model continued it."""
        if self.continues is not None:
            return self.earlier_digest
        return history_digest(self.system_prompt, (*self.earlier, *self.added))

    def stopped_reply(self) -> tuple[ClientRequest, str] | None:
        """The request that got the reply the client holds last, and that reply as the client holds it:
        a session that stored more of a reply the client stopped (the client dropped what was still on
        its way) continues when this is a prefix of what it stored. None without such a reply."""
        if self.continues is not None:
            return ClientRequest(self.system_prompt, self.earlier, self.new_message), self.continues
        if self.tool_results or len(self.earlier) < 2 or self.earlier[-2].role != "user":
            return None
        last = self.earlier[-1]
        if last.role != "assistant" or last.tool_calls:
            return None
        return ClientRequest(self.system_prompt, self.earlier[:-2], self.earlier[-2].content), self.earlier[-1].content

    def digest_with_reply(self, reply: str, tool_calls: Sequence[ClientToolCall] = ()) -> str:
        """The digest of what the client holds once it has the reply (its text and the tool calls it
        made): what its next request resends."""
        return history_digest(
            self.system_prompt, (*self.earlier, *self.added, ClientMessage("assistant", reply, tuple(tool_calls)))
        )

    @property
    def title(self) -> str:
        """A new session's title: the start of the conversation's first user message."""
        first = next((m.content for m in self.earlier if m.role == "user"), self.new_message)
        line = " ".join(first.split())
        return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"


def history_digest(system_prompt: str, messages: Sequence[ClientMessage]) -> str:
    """A digest of a conversation as the client sends it. Whitespace around a message does not count
    (clients trim replies differently); anything else, one character or the order, does."""
    canonical = [["system", system_prompt.strip()], *(m.canonical() for m in messages)]
    return hashlib.sha256(json.dumps(canonical, ensure_ascii=False).encode()).hexdigest()


def client_request(messages: Sequence[ClientMessage]) -> ClientRequest:
    """Split a request's messages. System messages (anywhere, as clients put them) make the system
    prompt; the last message is the user's new one, or the assistant's reply to the user's message
    before it, to continue, or the last of the tool results that answer the assistant's last tool
    calls (``tool_results``). Raises ClientHistoryError."""
    if not messages:
        raise ClientHistoryError("messages is empty: send at least the user's message.")
    for message in messages:
        if message.role not in CLIENT_ROLES:
            raise ClientHistoryError(
                f"a message's role is {message.role!r}: only {', '.join(CLIENT_ROLES)} messages are accepted."
            )
    system = "\n\n".join(m.content.strip() for m in messages if m.role == "system" and m.content.strip())
    turns = [m for m in messages if m.role != "system"]
    results = _tool_results(turns) if messages[-1].role == "tool" else ()
    if results:
        return ClientRequest(system, tuple(turns[: -len(results)]), "", None, results)
    last = turns[-1] if turns and messages[-1].role != "system" else None
    continues = last.content if last is not None and last.role == "assistant" and not last.tool_calls else None
    if continues is not None:
        turns.pop()
    if not turns or turns[-1].role != "user" or messages[-1].role == "system":
        role = messages[-1].role
        raise ClientHistoryError(
            f"the last message is the {role}'s: the last message must be the user's, or the assistant's reply "
            "to the user's message before it (to continue it)."
        )
    if not turns[-1].content.strip():
        raise ClientHistoryError(
            "the last message is empty." if continues is None else "the message replied to is empty."
        )
    return ClientRequest(system, tuple(turns[:-1]), turns[-1].content, continues)


def _tool_results(turns: Sequence[ClientMessage]) -> tuple[ClientMessage, ...]:
    """The tool messages ending ``turns`` when they follow an assistant message that called tools: the
    results of its calls. None otherwise (a tool message that answers no call is no conversation's end)."""
    start = len(turns)
    while start > 0 and turns[start - 1].role == "tool":
        start -= 1
    if start == 0 or turns[start - 1].role != "assistant" or not turns[start - 1].tool_calls:
        return ()
    return tuple(turns[start:])


def context_size_for(num_ctx: int | None, sizes: Sequence[tuple[int, int]], default: int) -> int:
    """The context size for a client's ``num_ctx``, from ``sizes`` (each selection with the num_ctx it
    sends): the largest whose num_ctx is not over the client's (the model is never given more than the
    client allowed), the smallest when all are; ``default`` when the client names none."""
    if num_ctx is None:
        return default
    fitting = [size for size, sent in sizes if sent <= num_ctx]
    return max(fitting) if fitting else min(size for size, _ in sizes)


def shared_length(stored: Sequence[tuple[str, str]], sent: Sequence[tuple[str, str]]) -> int:
    """How many leading ``(role, content)`` messages two histories have in common: the same role, and
    the same text but for the whitespace around it (as ``history_digest`` reads them)."""
    shared = 0
    for (stored_role, stored_text), (sent_role, sent_text) in zip(stored, sent, strict=False):
        if stored_role != sent_role or stored_text.strip() != sent_text.strip():
            break
        shared += 1
    return shared
