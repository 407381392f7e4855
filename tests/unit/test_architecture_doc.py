"""docs/architecture.md says what pyproject.toml's import contracts check: its table names every
contract by its name (and no contract that is gone), its picture every layer of the layers contracts."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"


def _contracts() -> list[dict[str, Any]]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        contracts: list[dict[str, Any]] = tomllib.load(file)["tool"]["importlinter"]["contracts"]
    return contracts


def _table_names() -> list[str]:
    """The first cell of each row of the doc's contract table."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = lines.index("| contract | what it keeps true |")
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(line.split("|")[1].strip())
    return rows


def _picture() -> str:
    """The layer picture: the first code block after the heading on the direction of dependencies."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## One direction of dependencies") :]
    return section.split("```")[1]


def test_the_table_names_each_contract_and_only_those() -> None:
    names = [contract["name"] for contract in _contracts()]
    rows = _table_names()
    assert sorted(rows) == sorted(names), (
        f"missing from docs/architecture.md: {sorted(set(names) - set(rows))}; "
        f"no such contract: {sorted(set(rows) - set(names))}"
    )


def test_the_picture_names_each_layer_of_the_layers_contracts() -> None:
    names = {
        name.strip("() ")
        for contract in _contracts()
        if contract["type"] == "layers"
        for layer in contract["layers"]
        for name in re.split(r"[|:]", layer)
    }
    picture = _picture()
    missing = sorted(name for name in names if not re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", picture))
    assert not missing, f"the layer picture of docs/architecture.md leaves out {missing}"
