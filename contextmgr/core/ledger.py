"""The fact ledger: the facts of compressed messages, kept verbatim beside the summary.

A summary by a small model loses facts; aging squeezes it further. The ledger
is the part of a checkpoint no LLM writes: every fact extracted from the
messages the checkpoint stands for, each once, rendered as one compact line
that reaches the prompt with the checkpoint. Aging never touches it; a merge
joins the ledgers of the merged checkpoints.

It has an explicit share of the context per tier. When the facts do not fit,
the policy is: facts of locked decisions first, then decisions, paths, URLs,
hosts, identifiers, versions, numbers, dates, names, next steps, code and
quotes; within a kind the newest first, so the oldest are dropped first.
What is dropped is returned, so the caller records it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from contextmgr.core.retention import Fact, normalize
from contextmgr.core.tiers import Tier

# The order in which facts keep their place when the ledger is over its share.
KIND_PRIORITY: tuple[str, ...] = (
    "decision",
    "path",
    "url",
    "host",
    "identifier",
    "version",
    "number",
    "date",
    "name",
    "marker",
    "code",
    "quote",
)
LEDGER_LABEL = "Facts: "
SEPARATOR = "; "


@dataclass(frozen=True)
class Ledger:
    entries: tuple[Fact, ...] = ()
    dropped: tuple[Fact, ...] = ()


def render_ledger(texts: Iterable[str]) -> str:
    """The ledger as the model reads it ("" when empty)."""
    texts = list(texts)
    return LEDGER_LABEL + SEPARATOR.join(texts) if texts else ""


def ledger_budget(*, max_tokens: int, tier: Tier) -> int:
    """One checkpoint's share: the tier's ledger share of the context, split over the
    checkpoints the tier keeps (its recent ones and the ultra checkpoint)."""
    return int(max_tokens * tier.ledger_share) // (tier.max_checkpoints + 1)


def _rank(fact: Fact, order: int, locked: Sequence[str]) -> tuple[int, int, int]:
    in_locked = any(normalize(fact.text) in decision for decision in locked)
    kind = KIND_PRIORITY.index(fact.kind) if fact.kind in KIND_PRIORITY else len(KIND_PRIORITY)
    return (0 if in_locked else 1, kind, -order)


def build_ledger(
    facts: Sequence[Fact],
    *,
    budget_tokens: int,
    cost: Callable[[str], int],
    locked_decisions: Sequence[str] = (),
    already_shown: str = "",
) -> Ledger:
    """The ledger of ``facts`` (oldest first, as extracted) within ``budget_tokens``.

    ``cost`` counts a text's tokens; ``already_shown`` is the rest of the checkpoint's
    structured text (decisions, files): a fact found there is not written twice, and
    counts as kept. Entries keep the order of ``facts``.
    """
    shown = normalize(already_shown)
    unique: dict[str, tuple[int, Fact]] = {}
    for order, fact in enumerate(facts):
        key = normalize(fact.text)
        if key and key not in unique and key not in shown:
            unique[key] = (order, fact)
    locked = [normalize(decision) for decision in locked_decisions]
    ranked = sorted(unique.values(), key=lambda item: _rank(item[1], item[0], locked))
    spent = cost(LEDGER_LABEL)
    kept: list[tuple[int, Fact]] = []
    dropped: list[tuple[int, Fact]] = []
    for order, fact in ranked:
        if any(normalize(fact.text) in normalize(other.text) for _, other in kept):
            continue  # "Maria" when "Maria Lopez" is in already: written once, and found there
        price = cost(fact.text + SEPARATOR)
        if spent + price <= budget_tokens:
            spent += price
            kept.append((order, fact))
        else:
            dropped.append((order, fact))
    return Ledger(
        entries=tuple(fact for _, fact in sorted(kept, key=lambda item: item[0])),
        dropped=tuple(fact for _, fact in sorted(dropped, key=lambda item: item[0])),
    )
