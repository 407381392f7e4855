"""The fact ledger: the facts of compressed messages, kept verbatim beside the summary.

A summary by a small model loses facts; aging squeezes it further. The ledger
is the part of a checkpoint no LLM writes: the fact-bearing clauses of the
messages the checkpoint stands for (``core.clauses``), each verbatim and once,
so a value reaches the prompt with what it is about ("the learning rate is
5e-4", not "5e-4"). Aging never touches it; a merge joins the ledgers of the
merged checkpoints.

It has an explicit share of the context per tier. When the clauses do not
fit, those of locked decisions go first, then the others by facts per token
(the specific tokens a clause holds for what it costs), the newer weighing up
to twice the oldest, so a long clause that says little is dropped before a
short one that says much. A clause the checkpoint already shows (its summary,
decisions, files) is not written twice. What is dropped is returned, so the
caller records it. Facts of the older kinds (bare strings, from checkpoints
made before clauses) are ranked the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from engine.core.clauses import specific_tokens
from engine.core.retention import Fact, normalize
from engine.core.tiers import Tier

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


def _rank(fact: Fact, order: int, count: int, locked: Sequence[str], cost: Callable[[str], int]) -> tuple[int, float]:
    """Locked decisions first, then facts per token, weighed by recency (the newest counts twice the oldest)."""
    key = normalize(fact.text)
    in_locked = any(key in decision or decision in key for decision in locked)
    density = max(1, len(specific_tokens(fact.text))) / max(1, cost(fact.text))
    recency = 1.0 + order / max(1, count - 1)
    return (0 if in_locked else 1, -density * recency)


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
    text (summary, decisions, files): a fact found there is not written twice, and
    counts as kept. Entries keep the order of ``facts``.
    """
    shown = normalize(already_shown)
    unique: dict[str, tuple[int, Fact]] = {}
    for order, fact in enumerate(facts):
        key = normalize(fact.text)
        if key and key not in unique and key not in shown:
            unique[key] = (order, fact)
    # "Maria" when "Maria Lopez" is a candidate too: written once, inside the longer one.
    unique = {key: item for key, item in unique.items() if not any(key in other and key != other for other in unique)}
    locked = [normalize(decision) for decision in locked_decisions]
    ranked = sorted(unique.values(), key=lambda item: _rank(item[1], item[0], len(facts), locked, cost))
    spent = cost(LEDGER_LABEL)
    kept: list[tuple[int, Fact]] = []
    dropped: list[tuple[int, Fact]] = []
    for order, fact in ranked:
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
