"""No module of the app or the engine is over 500 lines: past that a newcomer cannot hold one in mind,
and it usually does two jobs (migrations, which Django writes, aside)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ollm_site", "accounts", "chat", "contextmgr", "search", "engine", "modelserver")
MAX_LINES = 500


def test_no_module_is_over_500_lines() -> None:
    modules = [
        path for package in PACKAGES for path in (ROOT / package).rglob("*.py") if "migrations" not in path.parts
    ]
    assert len(modules) > 150
    long = {
        str(path.relative_to(ROOT)): lines
        for path in modules
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}
