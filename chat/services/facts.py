"""The facts a checkpoint carries: the reference its retention is measured on, and the
clauses its ledger keeps verbatim, fitted to its share of the session's context.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from chat.models import Checkpoint, Message, Session
from chat.selectors.context import locked_decisions
from engine.core.clauses import fact_clauses, reference_facts
from engine.core.ledger import Ledger, build_ledger, ledger_budget
from engine.core.retention import Fact, facts_from_json
from engine.resources import count_text_tokens

# A checkpoint that carries others' facts measures its retention on at most this many, the newest.
MAX_REFERENCE_FACTS = 1000


@dataclass(frozen=True)
class CarriedFacts:
    """What a checkpoint that takes over others (and messages) keeps: ``facts``, the reference
    facts of everything it stands for (its retention is measured on them), and ``ledger``, the
    clauses its ledger may hold before it is fitted to its share."""

    facts: tuple[Fact, ...]
    ledger: tuple[Fact, ...]


def clause_facts(texts: Iterable[str]) -> tuple[Fact, ...]:
    """The fact-bearing clauses of ``texts`` as ledger entries."""
    return tuple(Fact("clause", clause) for clause in fact_clauses(texts))


def carried_facts(
    checkpoints: Sequence[Checkpoint], messages: Iterable[Message] = (), *, with_summaries: bool = False
) -> CarriedFacts:
    """The reference facts and the ledger candidates of ``checkpoints`` (their ledgers, and with
    ``with_summaries`` the fact clauses of their summaries too: a rollover's extract may not hold
    them all), oldest first, then those of ``messages``, each once. A merge of aged checkpoints
    joins their ledgers only: aging shortens the summaries on purpose."""
    contents = [m.content for m in messages]
    facts: list[Fact] = []
    ledger: list[Fact] = []
    for checkpoint in checkpoints:
        facts += facts_from_json(checkpoint.facts)
        ledger += facts_from_json(checkpoint.ledger)
        if with_summaries:
            ledger += clause_facts([checkpoint.summary])
    facts += reference_facts(contents)
    ledger += clause_facts(contents)
    # A long session's ultra checkpoint would carry every token ever said: the newest are measured.
    reference = tuple(dict.fromkeys(facts))[-MAX_REFERENCE_FACTS:]
    return CarriedFacts(facts=reference, ledger=tuple(dict.fromkeys(ledger)))


def ledger_fit(*, session: Session, facts: Sequence[Fact], shown: Sequence[str], room: int | None = None) -> Ledger:
    """``facts`` fitted to one checkpoint's share of the session's context (engine/core/ledger.py),
    and to ``room`` tokens when that is less; a fact the checkpoint already ``shown`` (its summary,
    decisions, files) is not written twice."""
    share = ledger_budget(max_tokens=session.max_tokens, tier=session.profile.tier)
    return build_ledger(
        facts,
        budget_tokens=share if room is None else max(0, min(share, room)),
        cost=count_text_tokens,
        locked_decisions=locked_decisions(session=session),
        already_shown="\n".join(shown),
    )
