"""The fact ledger: the facts of compressed messages, kept verbatim beside the summary.

A summary by a small model loses facts; aging squeezes it further. The ledger
is the part of a checkpoint no LLM writes: the clauses of the messages the
checkpoint stands for that say something (``core.salience``), each verbatim and
once, so a value reaches the prompt with what it is about ("the learning rate is
5e-4", not "5e-4"; "we adopted Biscuit last Saturday (20 May 2023)", not
"Biscuit"). Aging never touches it; a merge joins the ledgers of the merged
checkpoints.

It has an explicit share of the session's memory (``memory_budget``). When the
clauses do not fit, those of locked decisions go first, then the others by
salience: the words a clause holds that are rare in the conversation and new
against what is kept, for what the clause costs. A clause the checkpoint already
shows (its summary, decisions, files) is not written twice. What is dropped is
returned, so the caller records it. Facts of the older kinds (bare strings, from
checkpoints made before clauses) are ranked the same way.

Entries say when and by whom they were said ("[20 May 2023, user] we adopted
Biscuit"); the ledger as the model reads it writes each header once for the
entries under it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from engine.core.retention import Fact, normalize
from engine.core.salience import salience_order, split_said
from engine.core.tiers import Tier

LEDGER_LABEL = "Facts: "
SEPARATOR = "; "


@dataclass(frozen=True)
class Ledger:
    entries: tuple[Fact, ...] = ()
    dropped: tuple[Fact, ...] = ()


def render_ledger(texts: Iterable[str]) -> str:
    """The ledger as the model reads it ("" when empty): one line, or, once its entries say when
    and by whom, a line per header (in the order each first comes) with the header written once."""
    lines: dict[str | None, list[str]] = {}
    for text in texts:
        header, clause = split_said(text)
        lines.setdefault(header, []).append(clause)
    if not lines:
        return ""
    if list(lines) == [None]:
        return LEDGER_LABEL + SEPARATOR.join(lines[None])
    rendered = (_line_head(header) + SEPARATOR.join(clauses) for header, clauses in lines.items())
    return LEDGER_LABEL.rstrip() + "\n" + "\n".join(rendered)


def _line_head(header: str | None) -> str:
    return f"{header}: " if header is not None else ""


def memory_budget(*, max_tokens: int, tier: Tier) -> int:
    """What the checkpoints of a session may take together, summaries and ledgers: the tier's
    share of the context. The ultra checkpoint a rollover leaves has all of it."""
    return int(max_tokens * tier.memory_share)


def ledger_budget(*, max_tokens: int, tier: Tier) -> int:
    """One checkpoint's share of the memory, split over the checkpoints the tier keeps (its
    recent ones and the ultra checkpoint)."""
    return memory_budget(max_tokens=max_tokens, tier=tier) // (tier.max_checkpoints + 1)


def build_ledger(
    facts: Sequence[Fact],
    *,
    budget_tokens: int,
    cost: Callable[[str], int],
    locked_decisions: Sequence[str] = (),
    already_shown: str = "",
    beside: str = "",
) -> Ledger:
    """The ledger of ``facts`` (oldest first, as extracted) within ``budget_tokens``.

    ``cost`` counts a text's tokens; ``already_shown`` is the rest of the checkpoint's
    text (summary, decisions, files): a fact found there is not written twice, and
    counts as kept; ``beside`` is what stays in the context beside the checkpoint (the newest
    messages): a fact that says what it says again ranks lower. Entries keep the order of ``facts``.
    """
    shown = normalize(already_shown)
    unique: dict[str, tuple[int, Fact]] = {}
    for order, fact in enumerate(facts):
        key = normalize(split_said(fact.text)[1])
        if key and key not in unique and key not in shown:
            unique[key] = (order, fact)
    # "Maria" when "Maria Lopez" is a candidate too: written once, inside the longer one.
    # normalize leaves no whitespace in a key, so in the keys joined by spaces a key found twice is inside another.
    joined = " ".join(unique)
    unique = {key: item for key, item in unique.items() if joined.count(key) == 1}
    locked = [normalize(decision) for decision in locked_decisions]
    candidates = list(unique.values())

    def in_locked(fact: Fact) -> bool:
        key = normalize(split_said(fact.text)[1])
        return any(key in decision or decision in key for decision in locked)

    ranked = [
        candidates[i]
        for i in salience_order([fact for _, fact in candidates], cost=cost, first=in_locked, beside=beside)
    ]
    spent = cost(LEDGER_LABEL)
    headers: set[str | None] = set()
    kept: list[tuple[int, Fact]] = []
    dropped: list[tuple[int, Fact]] = []
    for order, fact in ranked:
        header, clause = split_said(fact.text)
        # A header is paid for once, with the first entry under it.
        price = cost(clause + SEPARATOR) + (cost(_line_head(header) + "\n") if header not in headers else 0)
        if spent + price <= budget_tokens:
            spent += price
            headers.add(header)
            kept.append((order, fact))
        else:
            dropped.append((order, fact))
    return Ledger(
        entries=tuple(fact for _, fact in sorted(kept, key=lambda item: item[0])),
        dropped=tuple(fact for _, fact in sorted(dropped, key=lambda item: item[0])),
    )
