"""What an outside client's request is, besides a turn of a conversation: a one-shot background task,
and the client that sent it.

Open WebUI asks the model for a chat's title, its tags, follow-up questions, search queries, an
autocompletion or an emoji through the same endpoints as the chat itself, each as a request of its
own: one user message written from a template (backend/open_webui/config.py), most of which start
"### Task:" and embed the chat so far between ``<chat_history>`` tags. Answered as turns, each would
start a session of its own. Its retrieval template also starts "### Task:" but is the user's own
question with the sources (no ``<chat_history>``): that one is a turn.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from engine.core.client_history import ClientMessage

TASK_PREFIX = "### Task:"
# The emoji template is the one that does not start with TASK_PREFIX.
EMOJI_PREFIX = "Your task is to reflect the speaker's likely facial expression through a fitting emoji."
CHAT_HISTORY_OPEN = "<chat_history>"
CHAT_HISTORY_CLOSE = "</chat_history>"

TITLE = "title"
TAGS = "tags"
FOLLOW_UPS = "follow_ups"
QUERIES = "queries"
AUTOCOMPLETE = "autocomplete"
IMAGE_PROMPT = "image_prompt"
EMOJI = "emoji"
OTHER = "other"
# Each kind with what its template asks the reply to hold, tried in this order: the JSON key each asks for.
_KIND_MARKERS: tuple[tuple[str, str], ...] = (
    (FOLLOW_UPS, '"follow_ups"'),
    (TAGS, '"tags"'),
    (TITLE, '"title"'),
    (QUERIES, '"queries"'),
    (AUTOCOMPLETE, "autocompletion system"),
    (IMAGE_PROMPT, '"prompt"'),
)
TASK_KINDS = (TITLE, TAGS, FOLLOW_UPS, QUERIES, AUTOCOMPLETE, IMAGE_PROMPT, EMOJI, OTHER)
TASK_KIND_LABELS = {
    TITLE: "title",
    TAGS: "tags",
    FOLLOW_UPS: "follow-up questions",
    QUERIES: "search queries",
    AUTOCOMPLETE: "autocompletion",
    IMAGE_PROMPT: "image prompt",
    EMOJI: "emoji",
    OTHER: "other task",
}


def task_kind(messages: Sequence[ClientMessage]) -> str | None:
    """The kind of background task ``messages`` ask for (one of ``TASK_KINDS``), or None for a turn.

    A task is one user message, after system messages at most (a model's own system prompt), shaped
    as Open WebUI's task templates are: "### Task:" with the chat between ``<chat_history>`` tags, or
    its emoji template. A conversation that has an assistant reply is never a task."""
    if not messages or any(m.role not in ("system", "user") for m in messages):
        return None
    users = [m for m in messages if m.role == "user"]
    if len(users) != 1 or messages[-1] is not users[0]:
        return None
    text = users[0].content.strip()
    if text.startswith(EMOJI_PREFIX):
        return EMOJI
    if not text.startswith(TASK_PREFIX) or CHAT_HISTORY_OPEN not in text or CHAT_HISTORY_CLOSE not in text:
        return None
    # What the template asks for comes before the chat it embeds, which may quote anything.
    instructions = text[: text.index(CHAT_HISTORY_OPEN)]
    return next((kind for kind, marker in _KIND_MARKERS if marker in instructions), OTHER)


# Header names only a known client sends (lower case), and the name it is shown by.
_CLIENT_HEADERS: tuple[tuple[str, str], ...] = (("x-openwebui-", "Open WebUI"),)
UNKNOWN_CLIENT = "unknown client"


def client_label(user_agent: str, header_names: Iterable[str]) -> str:
    """The name a client is shown by: a known client's, told by the headers only it sends (Open WebUI's
    X-OpenWebUI-* user and chat headers, which it sends when forwarding user info is on), else its
    User-Agent, else "unknown client"."""
    names = [name.lower() for name in header_names]
    for prefix, label in _CLIENT_HEADERS:
        if any(name.startswith(prefix) for name in names):
            return label
    return user_agent.strip() or UNKNOWN_CLIENT
