"""The facts a checkpoint carries: the reference its retention is measured on, and the
clauses its ledger keeps verbatim, fitted to its share of the session's context.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from chat.models import Checkpoint, Message, Session
from chat.selectors.context import locked_decisions
from engine.core.clauses import reference_facts
from engine.core.ledger import Ledger, build_ledger, ledger_budget, memory_budget
from engine.core.retention import Fact, facts_from_json
from engine.core.salience import Said, said_clauses
from engine.resources import count_text_tokens

# A checkpoint that carries others' facts measures its retention on at most this many, the newest.
MAX_REFERENCE_FACTS = 1000
# A rollover reads the clauses of at most this many of the messages its checkpoints stand for, the newest:
# what is older reaches it through their ledgers (ranking every clause of a long history each time would
# make a rollover's time grow with it).
HISTORY_MESSAGES = 1500


@dataclass(frozen=True)
class CarriedFacts:
    """What a checkpoint that takes over others (and messages) keeps: ``facts``, the reference
    facts of everything it stands for (its retention is measured on them), and ``ledger``, the
    clauses its ledger may hold before it is fitted to its share."""

    facts: tuple[Fact, ...]
    ledger: tuple[Fact, ...]


def clause_facts(messages: Iterable[Message]) -> tuple[Fact, ...]:
    """The clauses of ``messages`` that say something, as ledger entries that say when and by whom."""
    return said_clauses([Said(m.role, m.content, m.created_at.date()) for m in messages])


def staying_text(messages: Iterable[Message]) -> str:
    """What ``messages``, staying in the context beside a checkpoint, say: its ledger's ``beside``."""
    return "\n".join(m.content for m in messages)


def _history(checkpoints: Sequence[Checkpoint]) -> list[Message]:
    """The newest ``HISTORY_MESSAGES`` messages that ``checkpoints`` stand for (those compressed into them
    or into the checkpoints merged into them), oldest first."""
    ids = {checkpoint.pk for checkpoint in checkpoints}
    while more := set(Checkpoint.objects.filter(merged_into__in=ids).exclude(pk__in=ids).values_list("pk", flat=True)):
        ids |= more
    newest = Message.objects.filter(compressed_into__in=ids).order_by("-position")[:HISTORY_MESSAGES]
    return sorted(newest, key=lambda message: message.position)


def carried_facts(
    checkpoints: Sequence[Checkpoint], messages: Iterable[Message] = (), *, with_history: bool = False
) -> CarriedFacts:
    """The reference facts and the ledger candidates of ``checkpoints`` (their ledgers, and with
    ``with_history`` the clauses of the messages they stand for, read again from the full history,
    each with its day and speaker: their summaries may not hold them all, and a summary says neither),
    oldest first, then those of ``messages``, each once. A merge of aged checkpoints joins their
    ledgers only: aging shortens the summaries on purpose."""
    messages = list(messages)
    facts: list[Fact] = []
    ledger: list[Fact] = []
    for checkpoint in checkpoints:
        facts += facts_from_json(checkpoint.facts)
        ledger += facts_from_json(checkpoint.ledger)
    if with_history and checkpoints:
        ledger += clause_facts(_history(checkpoints))
    facts += reference_facts(m.content for m in messages)
    ledger += clause_facts(messages)
    # A long session's ultra checkpoint would carry every token ever said: the newest are measured.
    reference = tuple(dict.fromkeys(facts))[-MAX_REFERENCE_FACTS:]
    return CarriedFacts(facts=reference, ledger=tuple(dict.fromkeys(ledger)))


def ledger_fit(
    *,
    session: Session,
    facts: Sequence[Fact],
    shown: Sequence[str],
    beside: str,
    room: int | None = None,
    share: int | None = None,
    ratio: float = 1.0,
    spare: int = 0,
) -> Ledger:
    """``facts`` fitted to ``share`` tokens (by default one checkpoint's share of the session's
    memory, engine/core/ledger.py) times ``ratio`` (cl100k tokens per token of the model that reads
    it), and to ``room`` tokens when that is less; a fact the checkpoint already ``shown`` (its
    summary, decisions, files) is not written twice, one that says again what stays in the context
    ``beside`` it (the text of the messages that stay) ranks lower; ``spare``: tokens it leaves unused
    below both."""
    if share is None:
        share = ledger_budget(max_tokens=session.max_tokens, tier=session.profile.tier)
    share = int(share * ratio)
    return build_ledger(
        facts,
        budget_tokens=max(0, (share if room is None else min(share, room)) - spare),
        cost=count_text_tokens,
        locked_decisions=locked_decisions(session=session),
        already_shown="\n".join(shown),
        beside=beside,
    )


def ultra_ledger_share(*, session: Session, summary_tokens: int, others_tokens: int = 0) -> int:
    """What the ultra checkpoint's ledger may take: the session's memory but for its own summary
    (``summary_tokens``) and the checkpoints that stay beside it (``others_tokens``), and never
    less than one checkpoint's share."""
    tier = session.profile.tier
    memory = memory_budget(max_tokens=session.max_tokens, tier=tier)
    return max(ledger_budget(max_tokens=session.max_tokens, tier=tier), memory - summary_tokens - others_tokens)
