"""Recall and precision of the fact extractor on hand-annotated conversations (no model).

The data is tests/data/heldout/ (see its README): ``tune/`` may guide changes to
the extractor, ``test/`` only measures it, and the requirement is read on
``test/``. Per assistant turn:

- recall: an annotated fact is found when one of the clauses the extractor
  keeps (``core.clauses.fact_clauses``) holds it, as it stands;
- precision: a kept clause is right when it holds at least one annotated fact;
- tokens: the kept clauses' share of the turn's tokens (what the ledger pays).

The pattern table alone (``core.fact_extraction.extract_facts``, bare strings) is
shown beside it: a fact counts when one of its strings holds the fact.

    .venv/bin/python bench/extractor.py
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from report import Report

from engine.core.clauses import fact_clauses
from engine.core.fact_extraction import extract_facts
from engine.core.retention import normalize
from engine.resources import count_text_tokens

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "heldout"
RECALL_TARGET = 0.95


@dataclass
class Score:
    facts: int = 0
    found: int = 0
    table_found: int = 0
    clauses: int = 0
    right: int = 0
    kept_tokens: int = 0
    tokens: int = 0

    @property
    def recall(self) -> float:
        return self.found / self.facts if self.facts else 1.0

    @property
    def precision(self) -> float:
        return self.right / self.clauses if self.clauses else 1.0


def score(half: str) -> tuple[Score, list[str]]:
    """The extractor's score on one half, and the facts it missed."""
    total = Score()
    missed: list[str] = []
    for path in sorted((DATA / half).glob("*.json")):
        for turn in json.loads(path.read_text())["turns"]:
            clauses = fact_clauses([turn["assistant"]])
            table = [normalize(fact.text) for fact in extract_facts([turn["assistant"]])]
            facts = [fact["text"] for fact in turn["facts"]]
            total.facts += len(facts)
            for fact in facts:
                if any(fact in clause for clause in clauses):
                    total.found += 1
                else:
                    missed.append(f"{path.stem}: {fact}")
                total.table_found += any(normalize(fact) in string for string in table)
            total.clauses += len(clauses)
            total.right += sum(any(fact in clause for fact in facts) for clause in clauses)
            total.kept_tokens += sum(count_text_tokens(clause) for clause in clauses)
            total.tokens += count_text_tokens(turn["assistant"])
    return total, missed


def main() -> None:
    report = Report("extractor")
    report.print("Fact clauses against hand-annotated facts (tests/data/heldout/); the requirement is read on test/")
    report.print("| half | facts | recall | precision | clauses | tokens kept | pattern table alone: recall |")
    report.print("|---|---|---|---|---|---|---|")
    results = {}
    for half in ("tune", "test"):
        result, missed = score(half)
        results[half] = (result, missed)
        report.print(
            f"| {half} | {result.facts} | {result.recall:.3f} | {result.precision:.3f} | {result.clauses} "
            f"| {result.kept_tokens / max(1, result.tokens):.0%} | {result.table_found / max(1, result.facts):.3f} |"
        )
    test, missed = results["test"]
    report.print(f"missed on test/ ({len(missed)}): " + "; ".join(missed))
    failed = test.recall < RECALL_TARGET
    if failed:
        report.print(f"requirement not met: recall {test.recall:.3f} on test/, under {RECALL_TARGET}")
    report.save()
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
