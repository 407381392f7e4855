"""The history an outside client resends: what is new in a request, and which session it continues.

Clients of Ollama's and OpenAI's APIs keep the conversation themselves and send all of it on every
call. A session remembers a digest of the history its client has seen (the request's messages and
the reply it got); the next request whose earlier messages have that digest continues the session,
and its last message is the only new one. A request that could not be answered leaves the digest of
its messages without a reply (``pending_digest``): the same request repeated continues the session.
A client that edited or trimmed its history sends earlier messages with another digest: that is a
new conversation, never a rewrite of the old one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

# The roles a client's history may hold; a tool's output has no place in a managed prompt yet.
CLIENT_ROLES = ("system", "user", "assistant")
TITLE_CHARS = 60


class ClientHistoryError(ValueError):
    """The request's messages are not a conversation this app can continue; the message says why."""


@dataclass(frozen=True)
class ClientMessage:
    role: str
    content: str


@dataclass(frozen=True)
class ClientRequest:
    """A request's messages, split: the system prompt, the earlier turns, the new user message."""

    system_prompt: str
    earlier: tuple[ClientMessage, ...]
    new_message: str

    @property
    def earlier_digest(self) -> str:
        """The digest a session has when this request continues it."""
        return history_digest(self.system_prompt, self.earlier)

    @property
    def pending_digest(self) -> str:
        """The digest of the history with the new message and no reply: a session that has it stored
        the message and could not answer it; this request repeated continues it."""
        return history_digest(self.system_prompt, (*self.earlier, ClientMessage("user", self.new_message)))

    def digest_with_reply(self, reply: str) -> str:
        """The digest of what the client holds once it has the reply: what its next request resends."""
        return history_digest(
            self.system_prompt,
            (*self.earlier, ClientMessage("user", self.new_message), ClientMessage("assistant", reply)),
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
    canonical = [["system", system_prompt.strip()], *([m.role, m.content.strip()] for m in messages)]
    return hashlib.sha256(json.dumps(canonical, ensure_ascii=False).encode()).hexdigest()


def client_request(messages: Sequence[ClientMessage]) -> ClientRequest:
    """Split a request's messages. System messages (anywhere, as clients put them) make the system
    prompt; the last message must be the user's, and is the new one. Raises ClientHistoryError."""
    if not messages:
        raise ClientHistoryError("messages is empty: send at least the user's message.")
    for message in messages:
        if message.role not in CLIENT_ROLES:
            raise ClientHistoryError(
                f"a message's role is {message.role!r}: only {', '.join(CLIENT_ROLES)} messages are accepted."
            )
    last = messages[-1]
    if last.role != "user":
        raise ClientHistoryError(f"the last message is the {last.role}'s: the last message must be the user's.")
    if not last.content.strip():
        raise ClientHistoryError("the last message is empty.")
    system = "\n\n".join(m.content.strip() for m in messages if m.role == "system" and m.content.strip())
    earlier = tuple(m for m in messages[:-1] if m.role != "system")
    return ClientRequest(system_prompt=system, earlier=earlier, new_message=last.content)


def context_size_for(num_ctx: int | None, sizes: Sequence[tuple[int, int]], default: int) -> int:
    """The context size for a client's ``num_ctx``, from ``sizes`` (each selection with the num_ctx it
    sends): the largest whose num_ctx is not over the client's (the model is never given more than the
    client allowed), the smallest when all are; ``default`` when the client names none."""
    if num_ctx is None:
        return default
    fitting = [size for size, sent in sizes if sent <= num_ctx]
    return max(fitting) if fitting else min(size for size, _ in sizes)
