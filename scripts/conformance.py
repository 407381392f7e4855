"""Run the spec conformance suite (tests/spec) and print one row per section of the spec.

    python scripts/conformance.py [extra pytest arguments]

A section is named by its test module's docstring (tests/spec/test_<section>.py);
the exit status is pytest's, so a failing claim fails `make conformance`.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "tests" / "spec"
# The spec's order of sections; a module not listed here comes after them.
ORDER = [
    "test_dynamic_budget",
    "test_compression_trigger",
    "test_checkpoint_system",
    "test_llm_summarization",
    "test_model_size_quality",
    "test_compression_rules",
    "test_goal_aware_compression",
    "test_goal_markers",
    "test_session_history",
    "test_snapshot_system",
    "test_reliability_tracking",
    "test_configuration",
    "test_events",
    "test_best_practices",
    "test_troubleshooting",
]


class ConformanceReport:
    """Counts collected, passed and failed tests per test module."""

    def __init__(self) -> None:
        self.sections: dict[str, str] = {}
        self.collected: Counter[str] = Counter()
        self.passed: set[str] = set()
        self.failed: set[str] = set()

    @staticmethod
    def _module(nodeid: str) -> str:
        return Path(nodeid.split("::", 1)[0]).stem

    def pytest_collection_finish(self, session: Any) -> None:
        for item in session.items:  # after deselection (-k, -m)
            module = self._module(item.nodeid)
            self.collected[module] += 1
            doc = (getattr(item.module, "__doc__", None) or "").strip()
            self.sections[module] = doc.splitlines()[0] if doc else module.removeprefix("test_").replace("_", " ")

    def pytest_runtest_logreport(self, report: Any) -> None:
        # A test fails if any phase (setup, call, teardown) fails; the suite has no skips,
        # so a skipped test is an unchecked claim and counts as failed too.
        if report.failed or report.skipped:
            self.failed.add(report.nodeid)
        elif report.when == "call" and report.passed:
            self.passed.add(report.nodeid)

    def _count(self, nodeids: set[str], module: str) -> int:
        return sum(1 for nodeid in nodeids if self._module(nodeid) == module)

    def rows(self) -> list[tuple[str, int, int, int]]:
        def rank(module: str) -> tuple[int, str]:
            return (ORDER.index(module) if module in ORDER else len(ORDER), module)

        return [
            (
                self.sections[m],
                self.collected[m],
                self._count(self.passed - self.failed, m),
                self._count(self.failed, m),
            )
            for m in sorted(self.collected, key=rank)
        ]


def render(rows: list[tuple[str, int, int, int]]) -> str:
    header = ("section", "tests", "passed", "failed")
    total = ("total", sum(row[1] for row in rows), sum(row[2] for row in rows), sum(row[3] for row in rows))
    table: list[tuple[Any, ...]] = [header, *rows, total]
    width = [max(len(str(row[i])) for row in table) for i in range(4)]

    def line(row: tuple[Any, ...]) -> str:
        cells = [str(row[0]).ljust(width[0])] + [str(row[i]).rjust(width[i]) for i in (1, 2, 3)]
        return "| " + " | ".join(cells) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in width) + "|"
    return "\n".join([line(header), rule, *(line(row) for row in rows), rule, line(total)])


def main(argv: list[str]) -> int:
    report = ConformanceReport()
    started = time.monotonic()
    status = pytest.main([str(SUITE), "-q", "-p", "no:logging", *argv], plugins=[report])
    seconds = time.monotonic() - started
    print()
    print("Spec conformance (docs/spec/ContextCompression.md)")
    print(render(report.rows()))
    print(f"{seconds:.1f} s")
    return int(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
